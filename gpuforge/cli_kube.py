"""``gpuforge kubeconfig``: the Kubernetes cluster's admin kubeconfig, fetched to this machine
(registered by :mod:`gpuforge.cli`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuforge.cli_args import SpecArg
from gpuforge.console import console
from gpuforge.spec import load_or_exit
from gpuforge.spec.cluster import Cluster

out = console()
err = console(stderr=True)


def kubeconfig(
    spec: SpecArg,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Where to write it (0600)")] = None,
) -> None:
    """Copy the cluster's admin kubeconfig from the first control plane to this machine (0600)."""
    from gpuforge.orchestrate.kubeconfig import KubeconfigError, fetch

    loaded = load_or_exit(spec)
    try:
        path = fetch(Cluster.of(loaded, spec), output)
    except KubeconfigError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None
    out.print(f"KUBECONFIG={path}", markup=False, highlight=False)
