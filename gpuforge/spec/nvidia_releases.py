"""NVIDIA's published releases and support windows: one cited data table.

* ``RELEASES``: the data center driver releases gpuforge knows, per branch (``gpuforge check``
  warns about a driver version that is not one of them: it could not be checked);
* ``BRANCHES``: each branch's designation and end of life (NVIDIA's driver lifecycle);
* ``GPU_OPERATOR``: per GPU Operator release, the drivers it ships and the Kubernetes minors it is
  validated with per OS (its component matrix and platform support pages);
* ``KUBERNETES_EOL``: the end-of-life date of each Kubernetes minor;
* ``CURRENT``: the newest upstream release of each pinned component, for ``bench/pinned_versions.py``.

Every row names its source (``SOURCES``); where sources disagree, ``DISAGREEMENTS`` says which one
is followed. Nothing here fetches anything: keeping current means editing this file from the cited
pages, then running ``bench/pinned_versions.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.citation import Citation
from gpuforge.spec.platforms import OsFamily

DRIVERS = "https://docs.nvidia.com/datacenter/tesla/drivers"
CND = "NVIDIA/cloud-native-docs"
#: The cloud-native-docs commits read: the v26.7.0 release docs, and the last before them (v26.3.x).
CND_V26_7 = "187a4a5bdc9d6ca222ee59cde894bad4ab20eec0"
CND_V26_3 = "ee48878104ac0215d0d97b722636fdac4a6c2141"

SOURCES: dict[str, Citation] = {
    "drivers-620": Citation(
        "NVIDIA Data Center Drivers (620): Supported Drivers and CUDA Toolkit Versions",
        f"{DRIVERS}/620/supported-drivers-and-cuda-toolkit-versions.html",
        "Table 2 CUDA and Drivers: R580 'Long Term Support Branch', End of Life 'June 2028'; R595 'Production "
        "Branch', 'March 2027'; R620 'Long Term Support Branch', 'September 2029'; maximum CUDA major 13 for all; "
        "'Only Long Term Support and Production branches are listed. New Feature Branches are short-lived and do "
        "not have an end-of-life date.'",
    ),
    "drivers-615": Citation(
        "NVIDIA Data Center Drivers (615): Supported Drivers and CUDA Toolkit Versions",
        f"{DRIVERS}/615/supported-drivers-and-cuda-toolkit-versions.html",
        "Table 2 CUDA and Drivers: R535 'Long Term Support Branch' End of Life 'June 2026' (CUDA 12); R580 LTSB "
        "'June 2028'; R595 'Production Branch' 'March 2027'; R610 'New Feature Branch' 'August 2026' (CUDA 13)",
    ),
    "drivers-580": Citation(
        "NVIDIA Data Center Drivers (v580, last updated 2025-08-04): Supported Drivers and CUDA Toolkit Versions",
        f"{DRIVERS}/supported-drivers-and-cuda-toolkit-versions.html",
        "R535 LTSB 'June 2026', R570 'Production Branch' 'February 2026', R580 LTSB 'August 2028'; 'All other "
        "previous driver branches not listed in the table above (such as R575, R565, R560, R550, R525, R515, ...) "
        "are end of life'",
    ),
    "driver-redist-620": Citation(
        "NVIDIA driver redistributable manifest redistrib_620.70.06.json",
        "NVIDIA's driver redistributables index, compute/nvidia-driver/redist/redistrib_620.70.06.json",
        "'release_date': '2026-11-04', 'release_label': '620.70.06', 'release_product': 'nvidia-driver' (the "
        "first R620 release; R620 is a 'Long Term Support Branch' with end of life 'September 2029', drivers-620)",
    ),
    "nvidia-forum-current-releases": Citation(
        "NVIDIA developer forums: Current graphics driver releases",
        "https://forums.developer.nvidia.com/t/current-graphics-driver-releases/28500/7",
        "'Current new feature branch release: 590.48.01' (R590 is a new feature branch)",
    ),
    "operator-matrix": Citation(
        f"{CND} gpu-operator/life-cycle-policy.rst, 'GPU Operator Component Matrix', every version in git",
        f"github.com/{CND} gpu-operator/life-cycle-policy.rst and release-notes.rst, history to commit {CND_V26_7}",
        "'NVIDIA GPU Driver' rows: each release the operator's driver containers ship, linked to its "
        "docs.nvidia.com/datacenter/tesla/tesla-release-notes-<version> page (v26.7.0: '610.57.04', '595.91.07 "
        "(R, D)', '580.173.02', '535.309.01')",
    ),
    "operator-lifecycle": Citation(
        f"{CND} gpu-operator/life-cycle-policy.rst (commit {CND_V26_7}); gpu-operator/versions1.json",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
        "'When a new major version of NVIDIA GPU Operator is released, the previous major version enters "
        "deprecated support ... All prior major versions enter end of support'; 'Support Status for Releases': "
        "'26.6.x Supported', '26.3.x Deprecated', '25.10.x and lower End of Support'; 'The GPU Operator is "
        "supported on all active NVIDIA data center production drivers'; versions1.json: 26.7 'preferred'",
    ),
    "operator-platforms-26.7": Citation(
        f"{CND} gpu-operator/platform-support.rst (commit {CND_V26_7}, GPU Operator v26.7.0)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
        "Bare Metal, column 'Kubernetes': 'Ubuntu 24.04 LTS' '1.32---1.36'; 'Ubuntu 22.04 LTS' '1.33---1.36'; "
        "'Red Hat Enterprise Linux 9.2, 9.4, 9.6, 9.7, 9.8' '1.33---1.36'; 'Rocky Linux 9.7' '1.33---1.36' "
        "(no Debian, no AlmaLinux row); footnote 1: 'The Kubernetes community only supports the last three minor "
        "releases'",
    ),
    "operator-platforms-26.3": Citation(
        f"{CND} gpu-operator/platform-support.rst (commit {CND_V26_3}, GPU Operator v26.3.x)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/26.3/platform-support.html",
        "Bare Metal, column 'Kubernetes': Ubuntu 22.04 and 24.04, RHEL 9.2-9.8, Rocky Linux 9.7: '1.32---1.36'",
    ),
    "kubernetes-releases": Citation(
        "Kubernetes release pages (kubernetes.io/releases/<minor>)",
        "https://kubernetes.io/releases/",
        "'End Of Life Date': 1.33 '2026-06-28', 1.34 '2026-10-27', 1.35 '2027-02-28', 1.36 '2027-06-28', "
        "1.37 '2027-10-28'",
    ),
    "pyxis-requires": Citation(
        "NVIDIA/pyxis v0.20.0 (commit 424563865a491f2d8f3c396a095d18db81f1fb07) and v0.24.0",
        "github.com/NVIDIA/pyxis README.md 'Installation'; debian/control; pyxis.spec",
        "'Pyxis requires the enroot container utility (version 3.1.0)'; 'Depends: ... enroot (>= 3.1.0) | "
        "enroot-hardened (>= 3.1.0)'; 'Since Slurm 21.08, pyxis must be compiled against the release of Slurm "
        "that is going to be deployed' (no other Slurm version bound in either release)",
    ),
    "upstream-tags": Citation(
        "Release tags of NVIDIA/mig-parted, NVIDIA/pyxis, NVIDIA/enroot and helm/helm (git snapshots of 2026-08)",
        "github.com/NVIDIA/mig-parted v0.15.0 (e2d5ad1f, 2026-08-19); github.com/NVIDIA/pyxis v0.24.0 "
        "(10751994, 2026-05-11); github.com/NVIDIA/enroot v4.1.2 (bd51f53b, 2026-03-23); github.com/helm/helm "
        "v4.2.4 (3900f434, 2026-08-13; v3.21.4 the newest Helm 3)",
        "the newest tag of each repository",
    ),
}

DISAGREEMENTS: dict[str, str] = {
    "r580-eol": (
        "the v580 drivers page gives R580's end of life as August 2028, the 615 and 620 pages as June 2028: "
        "gpuforge follows the newer pages"
    ),
    "operator-status-26.6": (
        "life-cycle-policy.rst (v26.7.0 docs) calls '26.6.x' supported; no 26.6 release exists and versions1.json "
        "marks 26.7 preferred: gpuforge reads the row as 26.7.x"
    ),
    "matrix-link-text": (
        "the v26.3.3 column shows '580.178.04' linked to the 580.173.02 notes, and an older column '535.274.02' "
        "linked to 535.274.03's: gpuforge lists the versions as the tables show them"
    ),
}


@dataclass(frozen=True)
class Branch:
    """A driver branch in NVIDIA's lifecycle: ``designation`` (LTSB, PB, NFB), ``end_of_life`` as NVIDIA
    names it (``YYYY-MM``: supported through that month; None: no date published), ``cuda_major``."""

    designation: str
    end_of_life: str | None
    cuda_major: int
    cite: str


#: Branches by number. "ended" rows are those the v580 page lists as end of life without a date: their
#: ``end_of_life`` is that page's month, the latest they can have ended.
BRANCHES: dict[int, Branch] = {
    525: Branch("ended", "2025-08", 12, "drivers-580"),
    535: Branch("LTSB", "2026-06", 12, "drivers-615"),
    550: Branch("ended", "2025-08", 12, "drivers-580"),
    560: Branch("ended", "2025-08", 12, "drivers-580"),
    565: Branch("ended", "2025-08", 12, "drivers-580"),
    570: Branch("PB", "2026-02", 12, "drivers-580"),
    575: Branch("ended", "2025-08", 12, "drivers-580"),
    580: Branch("LTSB", "2028-06", 13, "drivers-620"),
    590: Branch("NFB", None, 13, "nvidia-forum-current-releases"),
    595: Branch("PB", "2027-03", 13, "drivers-620"),
    610: Branch("NFB", "2026-08", 13, "drivers-615"),
    620: Branch("LTSB", "2029-09", 13, "drivers-620"),
}

DESIGNATIONS = {
    "LTSB": "long term support branch",
    "PB": "production branch",
    "NFB": "new feature branch",
    "ended": "end of life",
}


def _releases(text: str) -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for version in text.split():
        out.setdefault(int(version.split(".")[0]), []).append(version)
    return {b: tuple(vs) for b, vs in sorted(out.items())}


#: Every release of branches 525 and later that the GPU Operator's component matrix has named (operator-matrix),
#: and R620's first release (driver-redist-620). A release of a known branch that is not here, or a
#: well-formed release of a branch not here, is a warning (``nvidia_support.release_warning``), never a refusal.
RELEASES: dict[int, tuple[str, ...]] = _releases(
    """
    525.60.13 525.85.12 525.105.17 525.125.06 525.147.05
    535.54.03 535.86.10 535.104.05 535.104.12 535.129.03 535.154.05 535.161.07 535.161.08 535.183.01 535.183.06
    535.216.01 535.216.03 535.230.02 535.247.01 535.261.03 535.274.02 535.288.01 535.309.01
    550.54.14 550.54.15 550.90.07 550.90.12 550.127.05 550.127.08 550.144.03 550.163.01
    560.35.03
    565.57.01
    570.86.15 570.124.06 570.133.20 570.148.08 570.158.01 570.172.08 570.195.03 570.211.01
    575.57.08
    580.65.06 580.82.07 580.95.05 580.105.08 580.126.09 580.126.16 580.126.20 580.159.03 580.159.04 580.167.08
    580.173.02 580.178.04
    590.48.01
    595.58.03 595.71.05 595.91.07
    610.57.04
    620.70.06
    """
)


@dataclass(frozen=True)
class OperatorRelease:
    """One GPU Operator release: the drivers its containers ship (``default`` first marked D), and the
    Kubernetes minors (lowest, highest) it is validated with per OS; an OS absent is not validated."""

    drivers: tuple[str, ...]
    default_driver: str
    kubernetes: dict[OsFamily, tuple[int, int]]
    status: str
    cites: tuple[str, ...]


_K8S_26_7 = {
    OsFamily.UBUNTU2204: (33, 36),
    OsFamily.UBUNTU2404: (32, 36),
    OsFamily.RHEL9: (33, 36),
    OsFamily.ROCKY9: (33, 36),
}
_K8S_26_3 = dict.fromkeys((OsFamily.UBUNTU2204, OsFamily.UBUNTU2404, OsFamily.RHEL9, OsFamily.ROCKY9), (32, 36))
_D26_3 = ("595.71.05", "595.58.03", "590.48.01", "580.173.02", "580.167.08", "580.159.04", "580.159.03",
          "580.126.20", "570.211.01", "535.309.01", "535.288.01")  # fmt: skip
_C26_3 = ("operator-matrix", "operator-lifecycle", "operator-platforms-26.3")

GPU_OPERATOR: dict[str, OperatorRelease] = {
    "v26.7.0": OperatorRelease(
        ("610.57.04", "595.91.07", "580.173.02", "535.309.01"), "595.91.07", _K8S_26_7, "supported",
        ("operator-matrix", "operator-lifecycle", "operator-platforms-26.7"),
    ),
    "v26.3.0": OperatorRelease(_D26_3, "580.126.20", _K8S_26_3, "deprecated", _C26_3),
    "v26.3.1": OperatorRelease(_D26_3, "580.126.20", _K8S_26_3, "deprecated", _C26_3),
    "v26.3.2": OperatorRelease(_D26_3, "580.126.20", _K8S_26_3, "deprecated", _C26_3),
    "v26.3.3": OperatorRelease(
        ("610.57.04", "595.91.07", *_D26_3[:3], "580.178.04", *_D26_3[3:]), "580.126.20", _K8S_26_3, "deprecated",
        _C26_3,
    ),
}  # fmt: skip

#: Kubernetes minor -> end of life (kubernetes-releases).
KUBERNETES_EOL: dict[int, str] = {33: "2026-06-28", 34: "2026-10-27", 35: "2027-02-28", 36: "2027-06-28",
                                  37: "2027-10-28"}  # fmt: skip

#: pyxis needs at least this enroot (pyxis-requires); it is built against the installed Slurm, any release.
PYXIS_MIN_ENROOT = "3.1.0"


@dataclass(frozen=True)
class Current:
    """The newest upstream release of a pinned component, and where that is said."""

    version: str
    cite: str


#: ``Versions`` field -> newest upstream release (the GPU Operator v26.7.0 matrix pins its components).
CURRENT: dict[str, Current] = {
    "driver": Current("595.91.07", "operator-matrix"),
    "container_toolkit": Current("1.20.0", "operator-matrix"),
    "dcgm": Current("4.6.0", "operator-matrix"),
    "dcgm_exporter": Current("4.6.0-4.8.3", "operator-matrix"),
    "mig_manager": Current("0.15.0", "upstream-tags"),
    "gpu_operator": Current("v26.7.0", "operator-lifecycle"),
    "kubernetes": Current("1.37", "kubernetes-releases"),
    "pyxis": Current("0.24.0", "upstream-tags"),
    "enroot": Current("4.1.2", "upstream-tags"),
    "helm": Current("4.2.4", "upstream-tags"),
}
