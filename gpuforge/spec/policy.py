"""How a change to a spec field reaches a running cluster.

Every spec field declares one of three update policies (the idea comes from AWS
ParallelCluster's schema). The plan reads them to decide, for each changed field,
whether a change can be re-rendered and reloaded in place, must roll node by node
through drain -> change -> validate -> resume, or needs the cluster rebuilt.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

POLICY_KEY = "x-update-policy"


class UpdatePolicy(StrEnum):
    """How a change to a field is applied to a running cluster."""

    LIVE = "live"
    """Re-render in place and reload, reconfigure or restart the daemons that read the change; no drain,
    no reboot, no job disturbed (a daemon that runs jobs restarts only where its documentation says
    running jobs carry on, as Slurm's does for slurmd and slurmctld)."""

    ROLLING = "rolling"
    """Drain, change, validate and resume nodes one batch at a time."""

    REBUILD = "rebuild"
    """Cannot change on a running cluster; refused unless forced."""

    @property
    def rank(self) -> int:
        return {"live": 0, "rolling": 1, "rebuild": 2}[self.value]


POLICY_TEXT = {
    UpdatePolicy.LIVE: "change applied live (re-render, reload)",
    UpdatePolicy.ROLLING: "change applied rolling (drain, change, validate, resume)",
    UpdatePolicy.REBUILD: "change needs a rebuild (refused on a running cluster unless forced)",
}


def _field(policy: UpdatePolicy, default: Any, description: str, **kwargs: Any) -> Any:
    extra = dict(kwargs.pop("json_schema_extra", None) or {})
    extra[POLICY_KEY] = policy.value
    text = f"{description} [{POLICY_TEXT[policy]}]"
    if "default_factory" in kwargs:
        return Field(description=text, json_schema_extra=extra, **kwargs)
    return Field(default, description=text, json_schema_extra=extra, **kwargs)


def live(default: Any = ..., description: str = "", **kwargs: Any) -> Any:
    """A field whose change is applied live."""
    return _field(UpdatePolicy.LIVE, default, description, **kwargs)


def rolling(default: Any = ..., description: str = "", **kwargs: Any) -> Any:
    """A field whose change is applied node by node with a drain."""
    return _field(UpdatePolicy.ROLLING, default, description, **kwargs)


def rebuild(default: Any = ..., description: str = "", **kwargs: Any) -> Any:
    """A field that cannot change on a running cluster."""
    return _field(UpdatePolicy.REBUILD, default, description, **kwargs)
