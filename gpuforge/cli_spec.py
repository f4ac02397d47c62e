"""The commands that read the spec on this machine only and touch no node: ``check``,
``inventory``, ``schema`` and ``render`` (registered by :mod:`gpuforge.cli`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuforge.cli_args import SpecArg, StrictOpt, limited, load_known, print_warnings
from gpuforge.console import console
from gpuforge.spec import LIMIT_HELP, SpecError, load_or_exit, load_spec, resolve_nodes, spec_json_schema

out = console()
err = console(stderr=True)


def check(
    spec: SpecArg,
    json_out: Annotated[
        bool, typer.Option("--json", help="The result as one JSON document on stdout: ok, and each problem's place")
    ] = False,
    strict: StrictOpt = False,
) -> None:
    """Validate a spec file ('-': read it from stdin); touch no host. Warnings (what could not be checked,
    what is outside upstream's support) are printed and exit 0, or 2 with --strict."""
    from gpuforge.spec.load import STDIN_NAME, parse_spec_stream

    from_stdin = str(spec) == "-"
    try:  # from stdin: site paths are relative to the current folder; errors name <stdin>
        s = parse_spec_stream(sys.stdin.buffer, Path.cwd()) if from_stdin else load_spec(spec)
    except SpecError as e:
        if json_out:
            print(
                json.dumps(
                    {
                        "ok": False,
                        "errors": [
                            {"path": i.path, "line": i.line, "column": i.column, "node": i.node, "message": i.message}
                            for i in e.issues
                        ],
                    }
                )
            )
        else:
            err.print(e.format(), markup=False, highlight=False)
        raise typer.Exit(2) from None
    nodes = resolve_nodes(s)
    if json_out:
        from gpuforge.bundle.digest_warnings import every_warning

        found = [{"path": w.path, "message": w.message} for w in every_warning(s)]
        ok = not (strict and found)
        print(json.dumps({"ok": ok, "cluster": s.cluster.name, "nodes": len(nodes), "warnings": found}))
        if not ok:
            raise typer.Exit(2)
        return
    shown = Path(STDIN_NAME) if from_stdin else spec
    print_warnings(s, shown, strict)  # reported, not refused, unless --strict
    out.print(f"{shown}: OK ({s.cluster.scheduler.value} cluster {s.cluster.name!r}, {len(nodes)} nodes)")


def inventory(
    spec: SpecArg,
    fmt: Annotated[str, typer.Option("--format", help="ansible (JSON, which ansible-playbook -i reads)")] = "ansible",
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
) -> None:
    """Print the spec's nodes as an inventory, to run your own playbooks against the spec."""
    from gpuforge.extensions.ansible_inventory import ansible_inventory, vagrant_hosts

    s = load_or_exit(spec)
    if fmt != "ansible":
        err.print(f"--format {fmt!r}: the formats are: ansible", markup=False, highlight=False)
        raise typer.Exit(2)
    names = limited(s, limit)
    try:
        doc = ansible_inventory(s, names, vagrant_hosts(s, str(spec.resolve().parent)))
    except (ValueError, LookupError, RuntimeError, OSError) as e:
        err.print(f"inventory: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    print(json.dumps(doc, indent=2))


def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="The Markdown spec reference instead")] = False,
) -> None:
    """Write the JSON Schema of spec files (with each field's x-update-policy)."""
    from gpuforge.spec.reference import markdown_reference

    text = markdown_reference() if markdown else json.dumps(spec_json_schema(), indent=2, sort_keys=True) + "\n"
    if output:
        try:
            output.write_text(text)
        except OSError as e:
            err.print(f"cannot write {output}: {e.strerror or e}", markup=False, highlight=False)
            raise typer.Exit(2) from None
    else:
        sys.stdout.write(text)


#: ``render`` refuses to write more than this in one run (a huge cluster's /etc/hosts per node adds up).
MAX_RENDER_BYTES = 2 * 2**30


def render(
    spec: SpecArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write files to")],
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
) -> None:
    """Render every node's files into DIR/<node>/<path> (secrets and webhook credentials redacted).

    Each node's folder is replaced whole, so nothing of an earlier render stays; a full render (no
    --limit) also removes the folders of nodes the spec no longer has. Nothing else in DIR is touched.
    """
    from gpuforge.cli_render import RenderTreeError, write_tree
    from gpuforge.render import render_cluster

    s = load_known(spec)
    names = limited(s, limit)
    wanted = set(names) if names is not None else None
    rendered = {n: fs for n, fs in render_cluster(s).items() if wanted is None or n in wanted}
    total = sum(len(f.data) for files in rendered.values() for f in files)
    if total > MAX_RENDER_BYTES:
        err.print(
            f"render would write {total / 2**30:.1f} GiB for {len(rendered)} nodes (at most "
            f"{MAX_RENDER_BYTES // 2**30} GiB at once): render some nodes with --limit",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        written = write_tree(output.resolve(), rendered, full=names is None)
    except RenderTreeError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(2) from None
    except OSError as e:
        err.print(f"cannot write under {output}: {e.strerror or e} ({e.filename})", markup=False, highlight=False)
        raise typer.Exit(2) from None
    out.print(f"wrote {written} files for {len(rendered)} nodes under {output}")
