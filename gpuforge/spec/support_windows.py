"""Which Kubernetes minors each pinned add-on supports, as upstream publishes it: one cited data table.

* ``HELM_KUBERNETES``: Helm's version skew policy, per Helm minor (helm-skew-4, helm-skew-3);
* ``CALICO_KUBERNETES``: the Kubernetes minors Calico tests each release against (calico-requirements);
* ``NETWORK_OPERATOR_KUBERNETES``: the NVIDIA Network Operator's prerequisites (network-operator-platforms);
* ``VOLCANO_KUBERNETES``: Volcano's compatibility table (volcano-compatibility);
* ``GPU_OPERATOR_COMPONENTS``: the component versions a GPU Operator release pins (gpu-operator-values);
* ``PYXIS_TASK_EXIT_CLEANUP``: the first pyxis whose container cleanup runs at task exit on Slurm 25.05+.

flannel publishes no Kubernetes range (its README and Documentation/kubernetes.md name none), so a
flannel pin is not checked against one. Every table was read on ``REVIEWED`` (a constant: tests pin
their verdicts to it; ``bench/pinned_versions.py --strict`` compares with the clock). A version the
tables lack is a warning that says what could not be checked (``window_warnings``), never a refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

from gpuforge.spec.citation import Citation
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.k8s_upstream import CNI_DEFAULT_VERSIONS
from gpuforge.spec.model import Scheduler, Spec
from gpuforge.spec.network_operator_rules import network_operator_on

#: The day the tables below were last read against their sources.
REVIEWED = date(2026, 11, 29)

SOURCES: dict[str, Citation] = {
    "helm-skew-4": Citation(
        "Helm Version Support Policy (helm/helm-www docs/topics/version_skew.mdx, commit 227f4144, 2026-08-06)",
        "https://helm.sh/docs/topics/version_skew/",
        "'As of Helm 4, Helm is assumed to be compatible with n-3 versions of Kubernetes it was compiled against'; "
        "'| 4.2.x | 1.36.x - 1.33.x |', '| 4.1.x | 1.35.x - 1.32.x |', '| 4.0.x | 1.34.x - 1.31.x |'",
    ),
    "helm-skew-3": Citation(
        "Helm Version Support Policy, Helm 3 (helm/helm-www versioned_docs/version-3/topics/version_skew.md, "
        "commit 227f4144)",
        "https://helm.sh/docs/v3/topics/version_skew/",
        "'| 3.21.x | 1.36.x - 1.33.x |', '| 3.20.x | 1.35.x - 1.32.x |', '| 3.19.x | 1.34.x - 1.31.x |', "
        "'| 3.18.x | 1.33.x - 1.30.x |', '| 3.17.x | 1.32.x - 1.29.x |', '| 3.16.x | 1.31.x - 1.28.x |'",
    ),
    "helm3-eol": Citation(
        "Helm blog: Helm 3 End of Life (helm/helm-www blog/2026-06-02-helm3-eol.md)",
        "https://helm.sh/blog/helm-v3-end-of-life/",
        "'Bug fixes up to the final feature release, September 9th, 2026'; 'Security fixes end February 10th, "
        "2027'; 'After February 2027, Helm 3 will no longer receive any updates'",
    ),
    "calico-requirements": Citation(
        "Calico Open Source: System requirements for Kubernetes, 'Supported versions' (tigera/docs "
        "calico_versioned_docs/version-<v>/_includes/partials/_system-requirements.mdx, commit f2a27624, "
        "2026-08-21)",
        "https://docs.tigera.io/calico/latest/getting-started/kubernetes/requirements",
        "'We test Calico <version> against the following Kubernetes versions. Other versions may work, but we are "
        "not actively testing them.' 3.32: '1.34', '1.35', '1.36'; 3.31: '1.32' to '1.35'; 3.30: 'v1.31' to "
        "'v1.35'; 3.29: 'v1.29' to 'v1.32'",
    ),
    "network-operator-platforms": Citation(
        "NVIDIA Network Operator docs/platform-support.rst (Mellanox/network-operator-docs commit 0c0ecad4, "
        "2026-05-21, the 26.4 documentation)",
        "https://github.com/Mellanox/network-operator-docs/blob/main/docs/platform-support.rst",
        "Prerequisites: 'Kubernetes' '>=1.31 and <=1.35'; Supported Operating Systems and Kubernetes Platforms: "
        "Upstream Kubernetes '1.31-1.35' (an en dash in the page) for every listed OS",
    ),
    "volcano-compatibility": Citation(
        "volcano-sh/volcano README.md 'Kubernetes compatibility' (tag v1.15.1, commit 0a56ed33)",
        "https://github.com/volcano-sh/volcano#kubernetes-compatibility",
        "'Volcano v1.15': ✓ for Kubernetes 1.23 to 1.35; 'Volcano v1.14': 1.23 to 1.34; 'Volcano v1.13': 1.23 "
        "to 1.33; 'Volcano v1.12': 1.21 to 1.32; v1.11: 1.21 to 1.31; v1.10: 1.21 to 1.30 (no 1.36 column)",
    ),
    "gpu-operator-values": Citation(
        "NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/values.yaml (commit 10ee5b36)",
        "https://github.com/NVIDIA/gpu-operator/blob/v26.7.0/deployments/gpu-operator/values.yaml",
        "toolkit: 'image: container-toolkit', 'version: v1.20.0'; dcgm: 'version: 4.6.0-1-ubuntu24.04'; "
        "dcgmExporter: 'version: 4.6.0-4.8.3-distroless' (the exporter built against DCGM 4.6.0, as the "
        "dcgm-exporter README's quick start names 'nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless')",
    ),
    "pyxis-task-exit": Citation(
        "NVIDIA/pyxis commit a4b386fa 'Move container cleanup to slurm_spank_task_exit on Slurm 25.05+' "
        "(2025-09-26), first in tag v0.21.0; v0.24.0 (commit 10751994, 2026-05-11)",
        "https://github.com/NVIDIA/pyxis/commit/a4b386fa35e7873f7a59f049fd63b7331e47af7c",
        "later fixes up to v0.24.0: 'Fix potential NULL dereference in slurm_spank_task_exit', 'Improve "
        "robustness of the epilog container cleanup'",
    ),
}

Window = tuple[int, int]

#: Helm (major, minor) -> the Kubernetes minors it supports (helm-skew-4, helm-skew-3).
HELM_KUBERNETES: dict[tuple[int, int], Window] = {
    (4, 2): (33, 36), (4, 1): (32, 35), (4, 0): (31, 34),
    (3, 21): (33, 36), (3, 20): (32, 35), (3, 19): (31, 34), (3, 18): (30, 33), (3, 17): (29, 32), (3, 16): (28, 31),
}  # fmt: skip
#: Helm 3's last security fix day (helm3-eol): a Helm 3 pin is unsupported after it.
HELM3_SECURITY_FIXES_END = date(2027, 2, 10)
#: Calico (major, minor) -> the Kubernetes minors it is tested against (calico-requirements).
CALICO_KUBERNETES: dict[tuple[int, int], Window] = {(3, 32): (34, 36), (3, 31): (32, 35), (3, 30): (31, 35),
                                                   (3, 29): (29, 32)}  # fmt: skip
#: Network Operator (year, month) release line -> Kubernetes minors (network-operator-platforms).
NETWORK_OPERATOR_KUBERNETES: dict[tuple[int, int], Window] = {(26, 4): (31, 35)}
#: Volcano (major, minor) -> Kubernetes minors marked compatible (volcano-compatibility).
VOLCANO_KUBERNETES: dict[tuple[int, int], Window] = {
    (1, 15): (23, 35), (1, 14): (23, 34), (1, 13): (23, 33), (1, 12): (21, 32), (1, 11): (21, 31), (1, 10): (21, 30),
}  # fmt: skip
#: GPU Operator release -> ``Versions`` field -> the version it pins (gpu-operator-values).
GPU_OPERATOR_COMPONENTS: dict[str, dict[str, str]] = {
    "v26.7.0": {"container_toolkit": "1.20.0", "dcgm": "4.6.0", "dcgm_exporter": "4.6.0-4.8.3"},
}
#: The first pyxis that cleans containers up at task exit on Slurm 25.05+ (pyxis-task-exit).
PYXIS_TASK_EXIT_CLEANUP = "0.21.0"


def minor_key(version: str) -> tuple[int, int]:
    """``v3.32.1`` -> ``(3, 32)``; ``26.4.1`` -> ``(26, 4)``."""
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def window_problem(what: str, version: str, table: dict[tuple[int, int], Window], k8s: str, cite: str) -> str | None:
    """Why ``what`` ``version`` does not cover Kubernetes ``k8s`` (None: its row covers it)."""
    row = table.get(minor_key(version))
    minor = int(k8s.split(".")[1])
    where = SOURCES[cite].title
    if row is None:
        known = ", ".join(f"{a}.{b}" for a, b in table)
        return (
            f"{what} {version} is not in gpuforge's table, so its Kubernetes range could not be checked "
            f"(known: {known}; {where})"
        )
    if row[0] <= minor <= row[1]:
        return None
    return f"Kubernetes {k8s} is outside {what} {version}'s supported range 1.{row[0]}-1.{row[1]} ({where})"


def _helm(spec: Spec, today: date) -> Iterator[SpecIssue]:
    helm, k8s = spec.versions.helm, spec.versions.kubernetes
    why = window_problem("Helm", helm, HELM_KUBERNETES, k8s, "helm-skew-4" if helm.startswith("4") else "helm-skew-3")
    if why:
        yield SpecIssue(("versions", "helm"), why)
    if helm.startswith("3.") and today > HELM3_SECURITY_FIXES_END:
        ended = f"Helm 3 gets no fixes after {HELM3_SECURITY_FIXES_END} ({SOURCES['helm3-eol'].title}): use Helm 4"
        yield SpecIssue(("versions", "helm"), ended)


def _addons(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    if k is None:
        return
    k8s = spec.versions.kubernetes
    if k.cni.plugin == "calico":
        version = k.cni.version or CNI_DEFAULT_VERSIONS["calico"]
        why = window_problem("Calico", version, CALICO_KUBERNETES, k8s, "calico-requirements")
        if why:
            yield SpecIssue(("kubernetes", "cni", "version"), why)
    if k.batch_queue.kind == "volcano":
        why = window_problem("Volcano", k.batch_queue.version, VOLCANO_KUBERNETES, k8s, "volcano-compatibility")
        if why:
            yield SpecIssue(("kubernetes", "batch_queue", "version"), why)
    if network_operator_on(spec):
        no = k.network_operator.version
        why = window_problem("Network Operator", no, NETWORK_OPERATOR_KUBERNETES, k8s, "network-operator-platforms")
        if why:
            yield SpecIssue(("kubernetes", "network_operator", "version"), why)


def window_warnings(spec: Spec, today: date | None = None) -> list[SpecIssue]:
    """Every add-on pin of a Kubernetes cluster outside (or missing from) its cited Kubernetes window."""
    if spec.cluster.scheduler is not Scheduler.KUBERNETES or spec.kubernetes is None:
        return []
    return [*_helm(spec, today or date.today()), *_addons(spec)]
