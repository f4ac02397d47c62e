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

from gpuforge.bundle.downloads import ArtifactNeed, spec_needs
from gpuforge.spec import Spec
from gpuforge.spec.artifact_digests import pin_hint
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.hostlist import compress
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


def _warning(name: str, need: ArtifactNeed) -> SpecIssue:
    nodes = compress(need.nodes)
    message = (
        f"no sha256 is known for {name}, so {skipped(name)} is not installed (needed on {len(need.nodes)} "
        f"node(s): {nodes}); {pin_hint(name)}"
    )
    return SpecIssue(PIN_FIELD, message)


def artifact_warnings(spec: Spec) -> list[SpecIssue]:
    """One warning per release file the spec's nodes need whose sha256 is known neither from
    gpuforge's cited table nor from the spec's pins (nor checked otherwise), in the order found."""
    needs = spec_needs(spec).artifacts
    return [
        _warning(name, need)
        for name, need in needs.items()
        if need.artifact.sha256 is None and need.artifact.verified_by is None
    ]


def every_warning(spec: Spec, today: date | None = None) -> list[SpecIssue]:
    """``spec_warnings.all_warnings`` and then the release files left uninstalled: what ``check``,
    ``plan`` and ``apply`` print (and ``--strict`` refuses)."""
    return [*all_warnings(spec, today), *artifact_warnings(spec)]
