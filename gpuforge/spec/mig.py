"""What a MIG layout (mig-parted entries) makes of a node's GPUs: pure, shared by the spec rules and
the validator's Kubernetes checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuforge.spec.model import MigDevices


@dataclass(frozen=True)
class MigLayout:
    """``in_mig``: indices of the GPUs in MIG mode; ``devices``: MIG devices of the node by profile."""

    gpu_count: int
    in_mig: frozenset[int] = frozenset()
    devices: dict[str, int] = field(default_factory=dict)

    @property
    def full_gpus(self) -> int:
        """GPUs left outside MIG mode (offered whole)."""
        return self.gpu_count - len(self.in_mig)


def mig_layout(entries: Sequence[MigDevices], gpu_count: int) -> MigLayout:
    """The layout of ``entries`` on a node with ``gpu_count`` GPUs; as mig-parted applies them, the
    first entry that names a GPU decides it (the spec rules refuse overlaps)."""
    claimed: set[int] = set()
    in_mig: set[int] = set()
    devices: dict[str, int] = {}
    for entry in entries:
        indices = (set(range(gpu_count)) if entry.devices == "all" else set(entry.devices)) - claimed
        claimed |= indices
        if entry.mig_enabled:
            in_mig |= indices
            for profile, n in entry.mig_devices.items():
                devices[profile] = devices.get(profile, 0) + n * len(indices)
    return MigLayout(gpu_count, frozenset(in_mig), devices)
