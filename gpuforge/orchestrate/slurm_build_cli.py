"""``gpuforge slurm-build SPEC``: build SchedMD's Slurm for the spec's platforms now (``slurm.source: build``).

``apply`` does the same before it converges any node; this command builds ahead of time (or shows,
with ``--plan``, what is cached). Exit status: 0 every build is there; 1 a build failed (the message
names the missing dependency or the compiler's last lines; no node was converged); 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuforge.orchestrate.slurm_build import SlurmBuildError, ensure_builds, planned_builds
from gpuforge.spec import load_or_exit
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.slurm_packages import SlurmSource


def slurm_build_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    show_plan: Annotated[bool, typer.Option("--plan", help="Say what is cached and what would be built")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="The builds as JSON")] = False,
) -> None:
    """Build SchedMD's Slurm packages from the release tarball on each platform's build host (or find
    them in the cache) and keep them as signed repositories for apply to publish to the nodes."""
    s = load_or_exit(spec)
    if s.slurm is None or s.slurm.source is not SlurmSource.BUILD:
        print("slurm.source is not build: nothing to build", file=sys.stderr)
        raise typer.Exit(2)
    cluster = Cluster.of(s, spec)
    if show_plan:
        lines = planned_builds(cluster)
        print(json.dumps({"builds": lines}, indent=2) if json_out else "\n".join(lines))
        raise typer.Exit(0)
    try:
        done = ensure_builds(cluster, lambda m: print(m, file=sys.stderr, flush=True))
    except SlurmBuildError as e:
        print(str(e), file=sys.stderr)
        raise typer.Exit(1) from None
    rows = [
        {"platform": b.inputs.platform, "version": b.inputs.version, "host": b.inputs.host, "cached": b.cached,
         "seconds": round(b.seconds, 1), "folder": str(b.folder)}
        for b in done
    ]  # fmt: skip
    if json_out:
        print(json.dumps({"builds": rows}, indent=2))
    else:
        for r in rows:
            how = "cached" if r["cached"] else f"built in {r['seconds']} s"
            print(f"Slurm {r['version']} for {r['platform']} ({r['host']}): {how}: {r['folder']}")
