"""One run of the deploys (an apply, a plan, a plain ``pyinfra`` CLI run): what its operations
learn as they go and later operations or the caller read.

A run makes one :class:`RunState` and puts it in every host's data under :data:`RUN_STATE_KEY`
(``gpuforge.deploy.inventory``); pyinfra copies host data, and copying a ``RunState`` returns
the same object, so every host of the run shares it and nothing carries over to the next run.
Records are replaced, never appended, per (host, key), so pyinfra's change-detection pass and
the execute pass record the same thing.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuforge.deploy.converge import Step
from gpuforge.deploy.fact_prefetch import FactPrefetch
from gpuforge.deploy.slurm_changes import SlurmAction
from gpuforge.spec import k8s_upstream

if TYPE_CHECKING:
    from gpuforge.deploy.image_mode import ImageBuild, ImageCompare
    from gpuforge.deploy.runlog import RunLog

RUN_STATE_KEY = "gpuforge_run"
#: Host data key of the run's loaded :class:`~gpuforge.spec.Spec` (a deploy never reads the file again).
SPEC_KEY = "gpuforge_spec"
#: The one layer a token host runs (``gpuforge.deploy.layers.kubeadm.join_token_layer``).
JOIN_TOKEN_LAYER = "kubernetes-join-token"

_ACTION_RANK = {SlurmAction.NONE: 0, SlurmAction.RECONFIGURE: 1, SlurmAction.RESTART: 2}


@dataclass
class PlannedOp:
    """One operation's planned steps on one host (``gpuforge plan``)."""

    layer: str
    steps: list[Step]
    diffs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SlurmDecision:
    """What a node's slurm.conf change needs, why, and the nodes the change removes."""

    action: SlurmAction
    why: str
    removed: tuple[str, ...] = ()


@dataclass(eq=False)
class RunState:
    """The records of one run, by host name."""

    dry_run: bool = False
    """A plan: operations record their steps in ``planned`` and run nothing."""
    changed: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(dict))
    """Per host, per layer: the paths that changed (written while executing only)."""
    planned: dict[str, list[PlannedOp]] = field(default_factory=dict)
    reports: dict[str, dict[str, list[Step]]] = field(default_factory=lambda: defaultdict(dict))
    """Per host, per key: steps a person must read (reboots, missing sources, notes)."""
    slurm: dict[str, SlurmDecision] = field(default_factory=dict)
    k8s_members: dict[str, bool] = field(default_factory=dict)
    """Per Kubernetes node: already in the cluster (kubeadm init or join finished on it)."""
    k8s_token: str | None = field(default=None, repr=False)
    """This run's bootstrap token for joining nodes (SECRET: only ever written into 0600 files)."""
    token_hosts: frozenset[str] = frozenset()
    """Hosts in this pyinfra run only to make the join token: the first control plane, when the
    selection leaves it out (``kubeadm.token_hosts``). Every layer but :data:`JOIN_TOKEN_LAYER`
    is empty on them, and the run's result does not list them (``run_site``)."""
    layers: tuple[str, ...] | None = None
    """The layers this pyinfra run walks (None: all of them). A run with site Ansible steps walks
    the layers in segments, one pyinfra run each, with the steps between them."""
    prefetch: FactPrefetch | None = None
    """The current pyinfra run's merged fact reads (``run_site`` makes one per run; None: every
    layer reads on its own, as under the plain ``pyinfra`` CLI)."""
    site_steps: bool = True
    """Whether the site's Ansible steps run (``--tags``/``--skip-tags`` can leave them out)."""
    drained: frozenset[str] = frozenset()
    """Hosts this run changes while a rollout holds them drained (a batch): no job runs on them."""
    runlog: RunLog | None = None
    """The apply's run log (``gpuforge.deploy.runlog``): every step run is written to it (None: a
    plan, or a run outside ``gpuforge apply``)."""
    image: ImageBuild | ImageCompare | None = None
    """An image build or a plan's image comparison (``gpuforge.deploy.image_mode``); None: neither."""

    def __copy__(self) -> RunState:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> RunState:
        return self

    def converges(self, host: str, layer: str) -> bool:
        """Whether ``layer`` (or deploy) runs on ``host`` in this run: a token host runs the join token only."""
        if self.image is not None and not self.image.converges(layer):
            return False
        return host not in self.token_hosts or layer == JOIN_TOKEN_LAYER

    def record_changed(self, host: str, layer: str, paths: set[str]) -> None:
        self.changed[host][layer] = set(paths)

    def changed_paths(self, host: str, layer: str) -> set[str]:
        return set(self.changed.get(host, {}).get(layer, set()))

    def record_planned(self, host: str, op: PlannedOp) -> None:
        self.planned.setdefault(host, []).append(op)

    def record_report(self, host: str, key: str, steps: list[Step]) -> None:
        self.reports[host][key] = list(steps)

    def report_steps(self, host: str) -> list[Step]:
        return [s for steps in self.reports.get(host, {}).values() for s in steps]

    def reboot_required(self, host: str) -> list[str]:
        """Why ``host`` needs a reboot after this run (empty: it does not)."""
        return [s.summary for s in self.report_steps(host) if s.kind == "reboot-required"]

    def record_k8s_member(self, host: str, member: bool) -> None:
        self.k8s_members[host] = member

    def k8s_joining(self) -> list[str]:
        """Kubernetes nodes not yet in the cluster (as their layers found them)."""
        return sorted(h for h, member in self.k8s_members.items() if not member)

    def join_token(self) -> str:
        """This run's bootstrap token ``<id>.<secret>`` (bootstrap-tokens), made on first use."""
        if self.k8s_token is None:
            alphabet = k8s_upstream.TOKEN_ALPHABET
            token_id = "".join(secrets.choice(alphabet) for _ in range(k8s_upstream.TOKEN_ID_LEN))
            secret = "".join(secrets.choice(alphabet) for _ in range(k8s_upstream.TOKEN_SECRET_LEN))
            self.k8s_token = f"{token_id}.{secret}"
        return self.k8s_token

    def record_slurm(self, host: str, decision: SlurmDecision) -> None:
        self.slurm[host] = decision

    def slurm_action(self) -> tuple[SlurmAction, str]:
        """The strongest action any node's slurm.conf change needs in this run."""
        best = (SlurmAction.NONE, "")
        for d in self.slurm.values():
            if _ACTION_RANK[d.action] > _ACTION_RANK[best[0]]:
                best = (d.action, d.why)
        return best

    def slurm_removed_nodes(self) -> list[str]:
        return sorted({n for d in self.slurm.values() for n in d.removed})
