"""Kernel limits on the lab host that grow with the node count.

Every nspawn node runs its own systemd, journald and logind as root on the host's kernel,
and root's inotify limits are shared by all of them: with Debian's default of 128 instances,
the 22nd node's systemd fails with "Failed to create control group inotify object: Too many
open files". ``ensure_limits`` raises each limit to what ``nodes`` need (never lowers one) or
refuses with the exact ``sysctl`` to run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .system import LabError

PROC_SYS = "/proc/sys"


@dataclass(frozen=True)
class Limit:
    """A sysctl whose need is ``base + per_node * nodes``."""

    key: str
    per_node: int
    base: int

    def need(self, nodes: int) -> int:
        return self.base + self.per_node * nodes

    def path(self, root: str) -> str:
        return os.path.join(root, *self.key.split("."))


#: Measured on a 24-node lab: each idle node holds about 5 inotify instances (systemd, journald,
#: logind, sshd's parent) and a few hundred watches; the per-node figures leave twice that.
LIMITS = (
    Limit("fs.inotify.max_user_instances", per_node=12, base=128),
    Limit("fs.inotify.max_user_watches", per_node=4096, base=65536),
)


def ensure_limits(nodes: int, log: Callable[[str], None], root: str = PROC_SYS) -> list[str]:
    """Raise each limit below what ``nodes`` need; return the ``key=value`` settings made."""
    made: list[str] = []
    refused: list[str] = []
    for limit in LIMITS:
        path = limit.path(root)
        try:
            with open(path) as f:
                have = int(f.read().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            raise LabError(f"cannot read {limit.key} ({path}): {exc}") from exc
        need = limit.need(nodes)
        if have >= need:
            continue
        try:
            with open(path, "w") as f:
                f.write(f"{need}\n")
        except OSError:
            refused.append(f"{limit.key}={need}")
            continue
        made.append(f"{limit.key}={need}")
    if refused:
        raise LabError(
            f"{nodes} lab nodes need higher kernel limits than this host allows gpuforge to set; "
            f"run as root: sysctl -w {' '.join(refused)}"
        )
    if made:
        log(f"raised host limits for {nodes} nodes: {', '.join(made)}")
    return made
