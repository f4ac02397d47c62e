"""``gpuforge image``: bake node images from the spec (docs/images.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuforge.console import console
from gpuforge.spec import SpecError

app = typer.Typer(name="image", help="Node images baked from the spec (rootfs tarball, OCI, qcow2).",
                  no_args_is_help=True)  # fmt: skip
err = console(stderr=True)
out = console()


@app.command("build")
def build_cmd(
    spec: Annotated[Path, typer.Argument(help="The cluster spec (YAML).")],
    group: Annotated[str, typer.Option("--group", "-g", help="The node group whose image to bake.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the outputs.")] = Path("image"),
    formats: Annotated[
        str, typer.Option("--format", help="Comma-separated: rootfs, oci, qcow2, vagrant (the last two add a kernel).")
    ] = "rootfs,oci,qcow2",
) -> None:
    """Bake GROUP's image: the same layers as apply, run in image mode in a throwaway container
    (build lab gfimg, 10.213.21.0/24, or the next free one: gfimg2, gfimg3), nothing per node or
    secret; checked, then written to --output."""
    from gpuforge.image.build import ImageBuildError, build_image, parse_formats
    from gpuforge.image.scope import ImageSpecError
    from gpuforge.lab.plan import PlanError
    from gpuforge.lab.system import LabError, require_root
    from gpuforge.spec.cluster import load_cluster

    def say(message: str) -> None:
        err.print(message, markup=False, highlight=False)

    try:
        chosen = parse_formats(formats)
        require_root()
        result = build_image(load_cluster(spec), group, output, chosen, say)
    except SpecError as e:
        err.print(e.format(), markup=False, highlight=False)
        raise typer.Exit(2) from None
    except ImageSpecError as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    except (ImageBuildError, LabError, PlanError) as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    for note in result.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    out.print(f"image of group {group} built in {result.seconds:.0f} s: {output}", highlight=False)
