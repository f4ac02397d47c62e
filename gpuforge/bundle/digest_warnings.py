"""Warnings about release files the spec's nodes would install but whose sha256 nobody knows.

gpuforge never fetches or pushes such a file (``gpuforge.render.nvidia_sources.artifact``), so the
deploy step that installs it is skipped: pyxis, enroot, the GPU Operator chart or Kueue stay
uninstalled though the spec turns them on. ``check`` says so, naming the setting that pins the
file (``sources.artifact_sha256``) and what is skipped; ``--strict`` turns it into exit 2.

This lives beside the bundle (not in ``gpuforge.spec``) because what a spec installs is known from
the deploy side (``gpuforge.bundle.downloads.spec_needs``), which the spec layer may not import.
"""

from __future__ import annotations

from datetime import date

from gpuforge.bundle.downloads import spec_needs
from gpuforge.render.kubeadm import first_control_plane
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.artifact_digests import pin_hint
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.hostlist import compress
from gpuforge.spec.nodes import Node
from gpuforge.spec.spec_warnings import all_warnings

#: What is not installed when a release file has no known sha256, by the start of its file name.
SKIPPED: tuple[tuple[str, str], ...] = (
    ("pyxis-", "pyxis (Slurm's container plugin: srun --container-image)"),
    ("enroot+caps", "enroot's capabilities package (the container runtime pyxis uses)"),
    ("enroot", "enroot (the container runtime pyxis uses)"),
    ("nvidia-mig-manager", "the MIG manager (the nodes' MIG layout)"),
    ("gpu-operator-", "the GPU Operator"),
    ("network-operator-", "the Network Operator"),
    ("kueue-", "Kueue"),
    ("kuberay-operator-", "KubeRay"),
    ("kubeflow-trainer-", "Kubeflow Trainer"),
)

#: Where every artifact warning points: the setting that pins a release file's sha256.
PIN_FIELD = ("sources", "artifact_sha256")


def skipped(name: str) -> str:
    """What is left uninstalled without the release file ``name`` (the file itself when unlisted)."""
    return next((what for prefix, what in SKIPPED if name.startswith(prefix)), name)


def _warning(name: str, nodes: list[str]) -> SpecIssue:
    message = (
        f"no sha256 is known for {name}, so {skipped(name)} is not installed (needed on {len(nodes)} "
        f"node(s): {compress(nodes)}); {pin_hint(name)}"
    )
    return SpecIssue(PIN_FIELD, message)


def representatives(spec: Spec) -> tuple[list[Node], dict[str, list[str]]]:
    """One node per group (the first control plane on its own: it alone installs the add-ons), and
    the nodes each stands for: what a node needs follows from its group, so ``check`` of a
    10,000-node spec asks ``spec_needs`` about a few nodes, not all of them."""
    first = first_control_plane(spec) if spec.kubernetes is not None else None
    reps: list[Node] = []
    members: dict[str, list[str]] = {}
    by_key: dict[str, str] = {}
    for n in resolve_nodes(spec):
        key = f"node {n.name}" if first is not None and n.name == first.name else f"group {n.group}"
        if key not in by_key:
            by_key[key] = n.name
            reps.append(n)
            members[n.name] = []
        members[by_key[key]].append(n.name)
    return reps, members


def artifact_warnings(spec: Spec) -> list[SpecIssue]:
    """One warning per release file the spec's nodes need whose sha256 is known neither from
    gpuforge's cited table nor from the spec's pins (nor checked otherwise), in the order found."""
    reps, members = representatives(spec)
    needs = spec_needs(spec, reps).artifacts
    return [
        _warning(name, [m for rep in need.nodes for m in members[rep]])
        for name, need in needs.items()
        if need.artifact.sha256 is None and need.artifact.verified_by is None
    ]


def every_warning(spec: Spec, today: date | None = None) -> list[SpecIssue]:
    """``spec_warnings.all_warnings`` and then the release files left uninstalled: what ``check``,
    ``plan`` and ``apply`` print (and ``--strict`` refuses)."""
    return [*all_warnings(spec, today), *artifact_warnings(spec)]
