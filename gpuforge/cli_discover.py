"""``gpuforge discover``: each node's hardware read over SSH into the facts file beside the spec
(registered by :mod:`gpuforge.cli`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gpuforge.cli_args import SpecArg, check_limit, refuse
from gpuforge.console import console
from gpuforge.spec import LIMIT_HELP, SpecError
from gpuforge.spec.cluster import Cluster

out = console()
err = console(stderr=True)


def discover(
    spec: SpecArg,
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The facts read, errors and changes as JSON")] = False,
) -> None:
    """Read each node's CPUs, memory, NUMA, GPUs, NICs and disks over SSH into SPEC's .hardware.json
    (what discover: true groups use). Exit 0; 1 when a node could not be read; 2 on bad input."""
    from gpuforge.orchestrate.discover import discover as run_discover
    from gpuforge.spec import parse_spec
    from gpuforge.spec.load import read_spec_text

    try:  # the spec as written: a facts file that no longer fits is what discover rewrites
        s = parse_spec(read_spec_text(spec), str(spec))
        check_limit(s, limit)
        result = run_discover(Cluster.of(s, spec), limit)
    except SpecError as e:
        refuse(e.format())
    except OSError as e:
        refuse(f"cannot write the facts file beside {spec}: {e.strerror or e}")
    if json_out:
        print(json.dumps({"ok": result.ok, "file": str(result.path), "facts": result.facts,
                          "errors": result.errors, "changes": result.changes}, indent=2))  # fmt: skip
    else:
        for line in result.changes:
            out.print(line, markup=False, highlight=False, soft_wrap=True)
        for name, why in result.errors.items():
            err.print(f"{name}: {why}", markup=False, highlight=False, soft_wrap=True)
        out.print(f"{result.path}: {len(result.facts)} node(s) read, {len(result.errors)} not", markup=False)
    raise typer.Exit(0 if result.ok else 1)
