"""Swap state for Kubernetes nodes (stdlib only): ``/proc/swaps`` and ``/etc/fstab``.

kubelet refuses to start while swap is on (its ``failSwapOn`` default); kubeadm's preflight
says the same. The deploy turns swap off and comments out the fstab entries that would turn it
back on at boot; the node check reports swap that is on. Both read the files with these parsers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.probes._common import split_guarded
from gpuforge.probes.reading import Reading


def active_swaps(proc_swaps: str) -> list[str]:
    """Swap areas in use, per ``/proc/swaps`` (its first line is a header)."""
    lines = [line.split() for line in proc_swaps.splitlines()[1:]]
    return [fields[0] for fields in lines if fields]


def fstab_swap_lines(fstab: str) -> list[str]:
    """The uncommented ``/etc/fstab`` lines whose filesystem type is ``swap``."""
    found: list[str] = []
    for line in fstab.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            found.append(line)
    return found


@dataclass
class SwapsInfo:
    """``/proc/swaps``: whether it could be read, and the swap areas in use."""

    readable: bool
    active: list[str]


def parse_proc_swaps(lines: list[str]) -> SwapsInfo:
    out = split_guarded(lines)
    return SwapsInfo(out.ok, active_swaps("\n".join(out.lines)) if out.ok else [])


PROC_SWAPS: Reading[SwapsInfo] = Reading(
    "swap.proc_swaps", lambda: 'cat /proc/swaps 2>/dev/null; echo "__rc=$?"', parse_proc_swaps
)
