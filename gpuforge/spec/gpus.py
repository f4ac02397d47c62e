"""What gpuforge knows about each GPU model: PCI IDs, Slurm GRES type, MIG profiles, architecture,
the CPU architecture of its servers and which kernel modules drive it. One data table.

MIG profile names match NVIDIA mig-parted's ``config-default.yaml`` for the model's
PCI device IDs (a test checks this against the upstream file). Each profile carries
its compute and memory slices, so a layout can be checked before it reaches a GPU:
a GPU has ``compute_slices`` compute slices (7; 4 on the RTX PRO 6000 Blackwell) and its
memory is counted in eighths (``MEMORY_SLICES``): ``1g.24gb`` of a 96 GB RTX PRO 6000 is
2 of 8, as ``1g.10gb`` of an 80 GB H100 is 1 of 8.

Every value names where it came from: ``GpuModel.sources`` holds ``<fact>:<key>`` entries,
``<key>`` a :data:`SOURCES` citation and ``<fact>`` one of :data:`FACTS` (``pci``: the PCI
device IDs, ``memory``, ``mig``: the MIG profiles and counts, ``arch``: the GPU architecture,
``host``: the CPU architecture of a Grace superchip, ``open``: only the open kernel modules
drive it, ``max``: the most GPUs of the model one node has, ``max_per_node``, from NVIDIA's
HGX/DGX or platform documentation; None where no such figure is cited, and then nothing is
warned). ``tests/spec/test_gpus.py`` checks that every model cites each fact it states.

``memory_gb`` is the memory NVIDIA's MIG names give the whole GPU (``7g.<N>gb``; ``4g.96gb``
on the RTX PRO 6000), so B300 is 269 and GB300 278 where NVIDIA sells both as 288 GB HBM3e.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuforge.spec.citation import Citation
from gpuforge.spec.platforms import Arch

COMPUTE_SLICES = 7
MEMORY_SLICES = 8

#: GPU architectures as NVIDIA names them (MIG User Guide "Supported GPUs", GPU Operator platform
#: support), in lower case.
ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell")

#: What a ``GpuModel.sources`` entry can cite a source for.
FACTS = ("pci", "memory", "mig", "arch", "host", "open", "max")

#: MIG profile names (NVIDIA/go-nvlib ``MigProfileInfo.String``): ``<g>g.<gb>gb`` and at most one
#: attribute, ``+me`` / ``+me.all`` / ``+gfx`` or the negated ``-me``.
PROFILE_NAME = re.compile(r"(?P<g>[0-9])g\.(?P<gb>[0-9]+)gb(?P<variant>\+me\.all|\+me|\+gfx|-me)?")

#: What each profile-name suffix means (NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go, from the
#: NVML GPU instance profile: ``*_REV1``, ``*_ALL_ME``, ``*_GFX``, ``*_NO_ME``).
VARIANTS = {
    "": "the plain profile",
    "+me": "with the media extensions (one GPU instance of a GPU can hold them)",
    "+me.all": "with all of the GPU's media engines",
    "+gfx": "with graphics APIs enabled",
    "-me": "without media engines",
}

_MIG_PARTED = "github.com/NVIDIA/mig-parted"
_MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide"

SOURCES: dict[str, Citation] = {
    "pciids": Citation(
        "The PCI ID Repository (pci.ids)",
        "github.com/pciutils/pciids pci.ids (snapshot c1c12547d626, 2026-08-22)",
        "vendor '10de  NVIDIA Corporation': '20b0  GA100 [A100 SXM4 40GB]', '20b1  GA100 [A100 PCIe 40GB]', "
        "'20f1  GA100 [A100 PCIe 40GB]', '20f6  GA100 [A800 40GB PCIe]', '20b2  GA100 [A100 SXM4 80GB]', "
        "'20b5  GA100 [A100 PCIe 80GB]', '20f3  GA100 [A800-SXM4-80GB]', '20f5  GA100 [A800 80GB PCIe]', "
        "'2330  GH100 [H100 SXM5 80GB]', '2331  GH100 [H100 PCIe]', '2322  GH100 [H800 PCIe]', "
        "'2324  GH100 [H800]', '2321  GH100 [H100L 94GB]', '233a  GH100 [H800L 94GB]', "
        "'2335  GH100 [H200 SXM 141GB]', '233b  GH100 [H200 NVL]', '2342  GH100 [GH200 120GB / 480GB]', "
        "'2348  GH100 [GH200 144G HBM3e]', '26b9  AD102GL [L40S]', '27b8  AD104GL [L4]', "
        "'2901  GB100 [B200]', '2941  GB100 [HGX GB200]', "
        "'2bb5  GB202GL [RTX PRO 6000 Blackwell Server Edition]', '3182  GB110 [B300 SXM6 AC]', "
        "'31c2  GB110 [GB300]'",
    ),
    "hgx-h100-8gpu": Citation(
        "NVIDIA Technical Blog, 'Introducing NVIDIA HGX H100: An Accelerated Server Platform for AI and "
        "High-Performance Computing' (read in a verbatim copy of the post)",
        "www.dynasys.com.hk/blog/introducing-nvidia-hgx-h100-an-accelerated-server-platform-for-ai-and-high-performance-computing/",
        "HGX H100 8-GPU: 'The HGX H100 8-GPU represents the key building block of the new Hopper generation "
        "GPU server. It hosts eight H100 Tensor Core GPUs and four third-generation NVSwitch.'",
    ),
    "gb200-nvl-tuning-guide": Citation(
        "NVIDIA GB200 NVL Multi-Node Tuning Guide, 'Understanding Your Grace-Blackwell Systems'",
        "docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/system.html",
        "The 72x1 Configuration: 'GB200 72x1 contains one rack with 72 GPUs. Reference configuration: "
        "18x 1RU Compute trays (4 GPUs per compute tray).'",
    ),
    "open-gpu-kernel-modules": Citation(
        "NVIDIA Linux Open GPU Kernel Module Source, README.md (595.45.04)",
        "github.com/NVIDIA/open-gpu-kernel-modules README.md (df1c9a3de2be)",
        "Compatible GPUs: 'NVIDIA H200 | 2335 10DE 18BE', 'NVIDIA H200 NVL | 233B 10DE 1996', "
        "'NVIDIA GH200 144G HBM3e | 2348 10DE 18D2', 'NVIDIA L40S | 26B9 10DE 1851', "
        "'NVIDIA L4 | 27B8 10DE 16CA', 'NVIDIA B200 | 2901 10DE 1999', 'NVIDIA GB200 | 2941 10DE 2046', "
        "'NVIDIA RTX PRO 6000 Blackwell Server Edition | 2BB5 10DE 204E', "
        "'NVIDIA B300 SXM6 AC | 3182 10DE 20E6', 'NVIDIA GB300 | 31C2 10DE 21F1'",
    ),
    "mig-parted": Citation(
        "NVIDIA mig-parted v0.15.0, config-default.yaml",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml (v0.15.0, e2d5ad1fc72b); "
        "copy: ../shared/reference/upstream/mig-parted/config-default.yaml",
        "all-balanced device filters and comments: '# GB200 HGX' 0x294110DE, '# GB300' 0x31C210DE, "
        "'# RTX PRO 6000 Blackwell' 0x2BB510DE, '# B200' 0x290110DE, '# B300' 0x318210DE, "
        "'# GH200 144G HBM3e' 0x234810DE, '# H200 141GB, H200 NVL' 0x233510DE 0x233B10DE, "
        "'# H100-96GB, PG506-96GB, GH200, H20' 0x234210DE ...; the all-<profile> configs give each count",
    ),
    "mig-parted-b200": Citation(
        "NVIDIA mig-parted commits a7dc7c4b 'add support for the B200 GPU', 453b5af4 "
        "'[B200] add MIG profile for the 4g.90gb instance'",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml",
        "added under '# B200': all-1g.23gb (7), all-1g.23gb.me (1), all-1g.45gb (4), all-2g.45gb (3), "
        "all-3g.90gb (2), all-4g.90gb (1), all-7g.180gb (1)",
    ),
    "mig-parted-gb200": Citation(
        "NVIDIA mig-parted commits ebab1f77 'Use the correct mig partion settings for the GB200', "
        "4a493585 'mig-profile cleanup: remove unused profile'",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml",
        "'The current values oo not match the setting from the production boards': all-balanced for "
        "0x294110DE becomes 1g.23gb/2g.47gb/3g.93gb; added under '# GB200 HGX' all-1g.47gb (4), all-2g.47gb (3), "
        "all-3g.93gb (2), all-4g.93gb (1), all-7g.186gb (1); all-1g.23gb and all-1g.23gb.me re-labelled "
        "'# GB200, B200' (all-3g.95gb, all-4g.95gb, all-7g.189gb are left from the superseded 89dd81a3)",
    ),
    "mig-parted-b300": Citation(
        "NVIDIA mig-parted commit 47c56d96 'add support for the B300 GPU node'",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml",
        "all-balanced '# B300' 0x318210DE: 1g.34gb 2, 2g.67gb 1, 3g.135gb 1; added all-1g.34gb (7), "
        "all-1g.34gb.me (1), all-1g.67gb (4), all-2g.67gb (3), all-3g.135gb (2), all-4g.135gb (1), "
        "all-7g.269gb (1)",
    ),
    "mig-parted-gb300": Citation(
        "NVIDIA mig-parted commit 75449116 'add the mig profiles for GB300'",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml",
        "all-balanced '# GB300' 0x31C210DE: 1g.35gb 2, 2g.70gb 1, 3g.139gb 1; all-1g.35gb '# GB300' "
        "device-filter 0x31C210DE: 7; added all-1g.35gb.me (1), all-1g.70gb (4), all-2g.70gb (3), "
        "all-3g.139gb (2), all-4g.139gb (1), all-7g.278gb (1)",
    ),
    "mig-parted-gh200-144gb": Citation(
        "NVIDIA mig-parted commits 8cdf60f9 'Add GH200 144G HBM3e (x234810DE) to config-default.yaml', "
        "5af180da 'Add missing 1g.36gb config to config-default.yaml'",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml",
        "'# H200-141GB, GH200 144G HBM3e' all-1g.18gb (7), all-1g.18gb.me (1); added under "
        "'# GH200 144G HBM3e' all-1g.36gb (4), all-2g.36gb (3), all-3g.72gb (2), all-4g.72gb (1), all-7g.144gb (1)",
    ),
    "mig-parted-rtx-pro-6000": Citation(
        "NVIDIA mig-parted commits 9e0382f5 'updated MIG configs for RTX PRO 6000 Blackwell', 44b821d5 "
        "'fix device-filter for all-1g.24gb mig-parted config'; pkg/mig/builder/builder_test.go (v0.15.0)",
        f"{_MIG_PARTED} deployments/systemd/config-default.yaml, pkg/mig/builder/builder_test.go",
        "'# RTX PRO 6000 Blackwell': all-1g.24gb.gfx (4), all-1g.24gb.me.all (1), all-1g.24gb-me (4), "
        "all-2g.48gb (2), all-2g.48gb.gfx (2), all-2g.48gb.me.all (1), all-2g.48gb-me (2), all-4g.96gb (1), "
        "all-4g.96gb.gfx (1); all-1g.24gb (4) was filtered to 0x232110DE, 0x2BB510DE; builder_test "
        "'RTX-PRO-6000' also lists {Name: \"1g.24gb+me\", MaxCount: 1} (config all-1g.24gb.me)",
    ),
    "go-nvlib-mig-profile": Citation(
        "NVIDIA go-nvlib, pkg/nvlib/device/mig_profile.go",
        "github.com/NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go (3c161560521e)",
        "'AttributeMediaExtensions = \"me\"', 'AttributeMediaExtensionsAll = \"me.all\"', "
        "'AttributeGraphics = \"gfx\"'; NegAttributes for GPU_INSTANCE_PROFILE_*_SLICE_NO_ME; "
        "String(): suffix '+' + attributes, or '-' + negated attributes",
    ),
    "mig-guide-gpus": Citation(
        "NVIDIA Multi-Instance GPU User Guide (610): Supported GPUs",
        f"{_MIG_GUIDE}/610/supported-gpus.html",
        "Product | Architecture | Microarchitecture | Compute Capability | Memory Size | Max Number of Instances: "
        "'GB200 | Blackwell | GB100 | 10.0 | 186GB | 7', 'B200 | Blackwell | GB100 | 10.0 | 180GB | 7', "
        "'RTX PRO 6000 Blackwell Server Edition | Blackwell | GB202 | 12.0 | 96GB | 4', "
        "'H100-SXM5 | Hopper | GH100 | 9.0 | 80GB | 7', 'H100-PCIE | Hopper | GH100 | 9.0 | 94GB | 7', "
        "'H100 on GH200 | Hopper | GH100 | 9.0 | 96GB | 7', 'H200-SXM5 | Hopper | GH100 | 9.0 | 141GB | 7', "
        "'H200 NVL | Hopper | GH100 | 9.0 | 141GB | 7', "
        "'A100-SXM4 | NVIDIA Ampere architecture | GA100 | 8.0 | 40GB | 7' (and 80GB)",
    ),
    "gpu-operator-platforms": Citation(
        "NVIDIA GPU Operator: Platform Support",
        "github.com/NVIDIA/cloud-native-docs gpu-operator/platform-support.rst (52dcb7b8d956)",
        "Supported NVIDIA Data Center GPUs and Systems: 'NVIDIA GH200 | NVIDIA Grace Hopper' ('NVIDIA GH200 "
        "systems require the NVIDIA Open GPU Kernel module driver.'), 'NVIDIA H200, NVIDIA H200 NVL | NVIDIA "
        "Hopper', 'NVIDIA L40, NVIDIA L40S | NVIDIA Ada', 'NVIDIA L4 | NVIDIA Ada', 'NVIDIA A100 | NVIDIA "
        "Ampere', 'NVIDIA RTX PRO 6000 Blackwell Server Edition | NVIDIA Blackwell', 'NVIDIA HGX B200 | NVIDIA "
        "Blackwell', 'NVIDIA HGX B300 | NVIDIA Blackwell', 'NVIDIA HGX GB200 NVL72 | NVIDIA Blackwell', "
        "'NVIDIA HGX GB300 NVL72 | NVIDIA Blackwell'; Supported ARM Based Platforms: 'NVIDIA HGX GB200 NVL72 | "
        "Blackwell', 'NVIDIA HGX GB300 NVL72 | Blackwell'",
    ),
    "nim-gpu-memory": Citation(
        "NVIDIA NIM for Text Reranking 1.3.1: Support Matrix",
        "https://docs.nvidia.com/nim/nemo-retriever/text-reranking/1.3.1/support-matrix.html",
        "Supported Hardware, 'GPU | GPU Memory (GB)': 'L40s | 48', 'L4 | 24'",
    ),
    "nim-b300-memory": Citation(
        "NVIDIA NIM for LLMs 2.0.6, Support Matrix for NIM Day 0",
        "https://docs.nvidia.com/nim/large-language-models/2.0.6/day-0/support-matrix-day-0.html",
        "'The GPU Memory values are per GPU and in GB': 'NVIDIA-B300-SXM6-AC | 288' (the 288 GB sold; the "
        "MIG names count 269 GB on B300 and 278 GB on GB300)",
    ),
    "grace-arm": Citation(
        "NVIDIA Parabricks: NVIDIA Grace CPU Platforms",
        "https://docs.nvidia.com/clara/parabricks/get-started/nvidia-grace-cpu-platforms.html",
        "'systems powered by the NVIDIA Grace CPU architecture — including the NVIDIA GH200 Grace Hopper "
        "Superchip, the NVIDIA GB200 Grace Blackwell Superchip, and the NVIDIA GB300 NVL72 system'; "
        "'The Arm-based Grace CPU provides up to 72 cores per GPU'",
    ),
    "open-modules-only": Citation(
        "NVIDIA Technical Blog: NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules",
        "https://developer.nvidia.com/blog/nvidia-transitions-fully-towards-open-source-gpu-kernel-modules/",
        "Supported GPUs: 'For cutting-edge platforms such as NVIDIA Grace Hopper or NVIDIA Blackwell, you must "
        "use the open-source GPU kernel modules. The proprietary drivers are unsupported on these platforms.'",
    ),
}


@dataclass(frozen=True)
class MigProfile:
    """One MIG device profile such as ``1g.10gb``: ``compute`` slices of the GPU's
    ``compute_slices``, ``memory`` eighths of its memory, at most ``max_count`` on one GPU."""

    name: str
    compute: int
    memory: int
    max_count: int

    @property
    def variant(self) -> str:
        """The name's attribute suffix (a key of :data:`VARIANTS`): ``""``, ``+me``, ``+me.all``, ``+gfx``, ``-me``."""
        m = PROFILE_NAME.fullmatch(self.name)
        return (m["variant"] or "") if m else ""


@dataclass(frozen=True)
class GpuModel:
    """A GPU model the spec can name.

    ``host_arch``: the CPU architecture of the model's servers where the GPU is part of a Grace
    superchip (GH200, GB200, GB300); None where the GPU goes into any server (PCIe, HGX).
    ``open_kernel_modules_only``: NVIDIA supports only its open GPU kernel modules on it.
    ``max_per_node``: the most GPUs of the model in one node (HGX/DGX board, compute tray), where cited.
    ``sources``: ``<fact>:<key>`` entries (see the module docstring).
    """

    name: str
    gres_type: str
    pci_device_ids: tuple[str, ...]
    memory_gb: int
    mig_profiles: tuple[MigProfile, ...] = field(default=())
    architecture: str = ""
    host_arch: Arch | None = None
    open_kernel_modules_only: bool = False
    compute_slices: int = COMPUTE_SLICES
    max_per_node: int | None = None
    sources: tuple[str, ...] = ()

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def mig_device_filter(self) -> list[str]:
        """mig-parted ``device-filter`` values (``0x<device><vendor>``)."""
        return [f"0x{dev.upper()}10DE" for dev in self.pci_device_ids]

    def citations(self, fact: str) -> tuple[Citation, ...]:
        """The citations this model gives for ``fact`` (one of :data:`FACTS`)."""
        return tuple(SOURCES[s.split(":", 1)[1]] for s in self.sources if s.split(":", 1)[0] == fact)


def _family(mem: tuple[int, int, int, int, int], small: int) -> tuple[MigProfile, ...]:
    """The usual seven-profile MIG family; ``mem`` are the GB of 1g, 1g x2, 2g, 3g/4g and 7g."""
    g1, g1x2, g2, g3, g7 = mem
    return (
        MigProfile(f"1g.{g1}gb", 1, 1, small),
        MigProfile(f"1g.{g1}gb+me", 1, 1, 1),
        MigProfile(f"1g.{g1x2}gb", 1, 2, 4),
        MigProfile(f"2g.{g2}gb", 2, 2, 3),
        MigProfile(f"3g.{g3}gb", 3, 4, 2),
        MigProfile(f"4g.{g3}gb", 4, 4, 1),
        MigProfile(f"7g.{g7}gb", 7, 8, 1),
    )


#: RTX PRO 6000 Blackwell Server Edition: 4 compute slices, each 1/4 of the 96 GB (2 eighths); the
#: +gfx / +me.all / -me variants are there in mig-parted beside the plain profiles. mig-parted has
#: no 2g.48gb+me and no 4g.96gb-me / +me.all, so neither has this table.
_RTX_PRO_6000 = (
    MigProfile("1g.24gb", 1, 2, 4),
    MigProfile("1g.24gb+me", 1, 2, 1),
    MigProfile("1g.24gb+me.all", 1, 2, 1),
    MigProfile("1g.24gb-me", 1, 2, 4),
    MigProfile("1g.24gb+gfx", 1, 2, 4),
    MigProfile("2g.48gb", 2, 4, 2),
    MigProfile("2g.48gb+me.all", 2, 4, 1),
    MigProfile("2g.48gb-me", 2, 4, 2),
    MigProfile("2g.48gb+gfx", 2, 4, 2),
    MigProfile("4g.96gb", 4, 8, 1),
    MigProfile("4g.96gb+gfx", 4, 8, 1),
)

_PCI = ("pci:pciids", "pci:mig-parted")
#: A model the MIG User Guide's table lists (memory, architecture) with its profiles in mig-parted.
_IN_MIG_GUIDE = (*_PCI, "memory:mig-guide-gpus", "mig:mig-parted", "arch:mig-guide-gpus")

GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel(
            "A100-40GB",
            "a100",
            ("20B0", "20B1", "20F1", "20F6"),
            40,
            (
                MigProfile("1g.5gb", 1, 1, 7),
                MigProfile("1g.5gb+me", 1, 1, 1),
                MigProfile("1g.10gb", 1, 2, 4),
                MigProfile("2g.10gb", 2, 2, 3),
                MigProfile("3g.20gb", 3, 4, 2),
                MigProfile("4g.20gb", 4, 4, 1),
                MigProfile("7g.40gb", 7, 8, 1),
            ),
            architecture="ampere",
            sources=_IN_MIG_GUIDE,
        ),
        GpuModel(
            "A100-80GB",
            "a100",
            ("20B2", "20B5", "20F3", "20F5"),
            80,
            _family((10, 20, 20, 40, 80), 7),
            architecture="ampere",
            sources=_IN_MIG_GUIDE,
        ),
        GpuModel(
            "H100-80GB",
            "h100",
            ("2330", "2331", "2322", "2324"),
            80,
            _family((10, 20, 20, 40, 80), 7),
            architecture="hopper",
            max_per_node=8,
            sources=(*_IN_MIG_GUIDE, "max:hgx-h100-8gpu"),
        ),
        GpuModel(
            "H100-94GB",
            "h100nvl",
            ("2321", "233A"),
            94,
            _family((12, 24, 24, 47, 94), 7),
            architecture="hopper",
            sources=_IN_MIG_GUIDE,
        ),
        GpuModel(
            "H200-141GB",
            "h200",
            ("2335", "233B"),
            141,
            _family((18, 35, 35, 71, 141), 7),
            architecture="hopper",
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-guide-gpus",
                "mig:mig-parted",
                "arch:mig-guide-gpus",
                "arch:gpu-operator-platforms",
            ),
        ),
        GpuModel(
            "GH200-96GB",
            "gh200",
            ("2342",),
            96,
            _family((12, 24, 24, 48, 96), 7),
            architecture="hopper",
            host_arch=Arch.AARCH64,
            open_kernel_modules_only=True,
            sources=(
                *_PCI,
                "memory:mig-guide-gpus",
                "mig:mig-parted",
                "arch:mig-guide-gpus",
                "host:grace-arm",
                "open:open-modules-only",
                "open:gpu-operator-platforms",
            ),
        ),
        GpuModel(
            "GH200-144GB",
            "gh200",
            ("2348",),
            144,
            _family((18, 36, 36, 72, 144), 7),
            architecture="hopper",
            host_arch=Arch.AARCH64,
            open_kernel_modules_only=True,
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-parted-gh200-144gb",
                "mig:mig-parted",
                "mig:mig-parted-gh200-144gb",
                "arch:gpu-operator-platforms",
                "host:grace-arm",
                "open:open-modules-only",
                "open:gpu-operator-platforms",
            ),
        ),
        GpuModel(
            "B200",
            "b200",
            ("2901",),
            180,
            _family((23, 45, 45, 90, 180), 7),
            architecture="blackwell",
            open_kernel_modules_only=True,
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-guide-gpus",
                "mig:mig-parted",
                "mig:mig-parted-b200",
                "arch:mig-guide-gpus",
                "arch:gpu-operator-platforms",
                "open:open-modules-only",
            ),
        ),
        GpuModel(
            "GB200",
            "gb200",
            ("2941",),
            186,
            _family((23, 47, 47, 93, 186), 7),
            architecture="blackwell",
            host_arch=Arch.AARCH64,
            open_kernel_modules_only=True,
            max_per_node=4,
            sources=(
                "max:gb200-nvl-tuning-guide",
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-guide-gpus",
                "mig:mig-parted",
                "mig:mig-parted-gb200",
                "arch:mig-guide-gpus",
                "arch:gpu-operator-platforms",
                "host:grace-arm",
                "host:gpu-operator-platforms",
                "open:open-modules-only",
            ),
        ),
        GpuModel(
            "B300",
            "b300",
            ("3182",),
            269,
            _family((34, 67, 67, 135, 269), 7),
            architecture="blackwell",
            open_kernel_modules_only=True,
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-parted-b300",
                "memory:nim-b300-memory",
                "mig:mig-parted",
                "mig:mig-parted-b300",
                "arch:gpu-operator-platforms",
                "open:open-modules-only",
            ),
        ),
        GpuModel(
            "GB300",
            "gb300",
            ("31C2",),
            278,
            _family((35, 70, 70, 139, 278), 7),
            architecture="blackwell",
            host_arch=Arch.AARCH64,
            open_kernel_modules_only=True,
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-parted-gb300",
                "mig:mig-parted",
                "mig:mig-parted-gb300",
                "arch:gpu-operator-platforms",
                "host:grace-arm",
                "host:gpu-operator-platforms",
                "open:open-modules-only",
            ),
        ),
        GpuModel(
            "RTX-PRO-6000-BSE",
            "rtxpro6000",
            ("2BB5",),
            96,
            _RTX_PRO_6000,
            architecture="blackwell",
            open_kernel_modules_only=True,
            compute_slices=4,
            sources=(
                *_PCI,
                "pci:open-gpu-kernel-modules",
                "memory:mig-guide-gpus",
                "mig:mig-parted",
                "mig:mig-parted-rtx-pro-6000",
                "mig:go-nvlib-mig-profile",
                "arch:mig-guide-gpus",
                "arch:gpu-operator-platforms",
                "open:open-modules-only",
            ),
        ),
        GpuModel(
            "L40S",
            "l40s",
            ("26B9",),
            48,
            architecture="ada",
            sources=(
                "pci:pciids",
                "pci:open-gpu-kernel-modules",
                "memory:nim-gpu-memory",
                "arch:gpu-operator-platforms",
            ),
        ),
        GpuModel(
            "L4",
            "l4",
            ("27B8",),
            24,
            architecture="ada",
            sources=(
                "pci:pciids",
                "pci:open-gpu-kernel-modules",
                "memory:nim-gpu-memory",
                "arch:gpu-operator-platforms",
            ),
        ),
    )
}


def gpu_model(name: str) -> GpuModel:
    """Look a model up by its spec name (raises KeyError)."""
    return GPU_MODELS[name]
