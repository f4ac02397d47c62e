"""Swap state for Kubernetes nodes (stdlib only): ``/proc/swaps`` and ``/etc/fstab``.

kubelet refuses to start while swap is on (its ``failSwapOn`` default); kubeadm's preflight
says the same. The deploy turns swap off and comments out the fstab entries that would turn it
back on at boot; the node check reports swap that is on. Both read the files with these parsers.
"""

from __future__ import annotations


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
