"""Node roles -> the layers they need, and the one order all layers run in.

pyinfra runs each operation on every host before the next, so a single global order
(base before munge before Slurm, ...) holds for the whole cluster; a node runs the layers
its roles need, in that order. Rendering (which files a node gets) and the deploys both
read this table.
"""

from __future__ import annotations

from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node

# Global order of the layers (module names under gpuforge/deploy/layers/).
LAYER_ORDER: tuple[str, ...] = (
    "base", "packages", "storage", "munge", "nvidia", "fabric", "kubernetes", "slurm", "monitoring", "health",
)  # fmt: skip

ROLE_DEPLOYS: dict[Role, tuple[str, ...]] = {
    # nvidia: pyxis on configless controllers, whose plugstack.conf (served to every node) names it
    Role.CONTROLLER: ("base", "packages", "munge", "nvidia", "fabric", "slurm", "monitoring", "health"),
    Role.COMPUTE: ("base", "packages", "munge", "nvidia", "fabric", "slurm", "monitoring", "health"),
    Role.LOGIN: ("base", "packages", "munge", "nvidia", "fabric", "slurm", "monitoring"),
    Role.ACCOUNTING_DB: ("base", "packages", "munge", "fabric", "slurm", "monitoring"),
    Role.MONITORING: ("base", "packages", "fabric", "monitoring"),
    # nvidia: its container-engine layer (containerd, systemd cgroups) runs on every Kubernetes node
    Role.K8S_CONTROL_PLANE: ("base", "packages", "nvidia", "fabric", "kubernetes", "monitoring"),
    Role.K8S_WORKER: ("base", "packages", "nvidia", "fabric", "kubernetes", "monitoring"),
    Role.STORAGE: ("base", "packages", "storage", "fabric", "monitoring"),  # mounts: every node (layers/storage.py)
}


def deploys_for(node: Node) -> list[str]:
    """The deploys a node needs, in the global order."""
    wanted = {d for role in node.roles for d in ROLE_DEPLOYS[role]}
    return [d for d in LAYER_ORDER if d in wanted]


def cluster_deploys(spec: Spec, nodes: list[Node]) -> list[str]:
    """Every deploy any of ``nodes`` needs, in the global order."""
    wanted = {d for n in nodes for d in deploys_for(n)}
    return [d for d in LAYER_ORDER if d in wanted]
