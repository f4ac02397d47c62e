"""What gpuforge knows about each GPU model: PCI IDs, Slurm GRES type, MIG profiles.

MIG profile names match NVIDIA mig-parted's ``config-default.yaml`` for the model's
PCI device IDs (a test checks this against the upstream file). Each profile carries
its compute and memory slices, so a layout can be checked before it reaches a GPU:
a GPU has 7 compute slices and 8 memory slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True)
class MigProfile:
    """One MIG device profile such as ``1g.10gb``."""

    name: str
    compute: int
    memory: int
    max_count: int


@dataclass(frozen=True)
class GpuModel:
    """A GPU model the spec can name."""

    name: str
    gres_type: str
    pci_device_ids: tuple[str, ...]
    memory_gb: int
    mig_profiles: tuple[MigProfile, ...] = field(default=())

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def mig_device_filter(self) -> list[str]:
        """mig-parted ``device-filter`` values (``0x<device><vendor>``)."""
        return [f"0x{dev.upper()}10DE" for dev in self.pci_device_ids]


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
        ),
        GpuModel("A100-80GB", "a100", ("20B2", "20B5", "20F3", "20F5"), 80, _family((10, 20, 20, 40, 80), 7)),
        GpuModel("H100-80GB", "h100", ("2330", "2331", "2322", "2324"), 80, _family((10, 20, 20, 40, 80), 7)),
        GpuModel("H100-94GB", "h100nvl", ("2321", "233A"), 94, _family((12, 24, 24, 47, 94), 7)),
        GpuModel("H200-141GB", "h200", ("2335", "233B"), 141, _family((18, 35, 35, 71, 141), 7)),
        GpuModel("GH200-96GB", "gh200", ("2342",), 96, _family((12, 24, 24, 48, 96), 7)),
        GpuModel("L40S", "l40s", ("26B9",), 48),
    )
}


def gpu_model(name: str) -> GpuModel:
    """Look a model up by its spec name (raises KeyError)."""
    return GPU_MODELS[name]
