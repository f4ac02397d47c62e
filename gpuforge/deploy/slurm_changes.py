"""How a slurm.conf change must reach running daemons (Slurm 22.05 rules).

``scontrol reconfigure`` re-reads most parameters, partitions included. Adding or
removing nodes, changing node definitions, and a handful of plugin/daemon settings
need slurmctld and every slurmd restarted.
"""

from __future__ import annotations

from enum import StrEnum

from gpuforge.spec import hostlist

RESTART_KEYS = frozenset(
    {
        "AuthType",
        "CredType",
        "CryptoType",
        "ClusterName",
        "SlurmctldHost",
        "ControlMachine",
        "SlurmctldPort",
        "SlurmdPort",
        "SlurmUser",
        "SlurmdUser",
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "PluginDir",
        "SelectType",
        "SelectTypeParameters",
        "GresTypes",
        "ProctrackType",
        "TaskPlugin",
        "SwitchType",
        "JobAcctGatherType",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStoragePort",
        "TopologyPlugin",
        "PreemptType",
        "SlurmctldParameters",
        "MpiDefault",
        "LaunchType",
    }
)


class SlurmAction(StrEnum):
    NONE = "none"
    RECONFIGURE = "reconfigure"
    RESTART = "restart"


def parse_slurm_conf(text: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(scalar parameters, node name -> node definition, partition name -> definition)."""
    params: dict[str, str] = {}
    nodes: dict[str, str] = {}
    parts: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or "=" not in line:
            continue
        key, _, rest = line.partition("=")
        if key == "NodeName":
            name, _, attrs = rest.partition(" ")
            if name.upper() == "DEFAULT":
                params["NodeName=DEFAULT"] = attrs
                continue
            for n in hostlist.expand(name):
                nodes[n] = attrs.strip()
        elif key == "PartitionName":
            name, _, attrs = rest.partition(" ")
            parts[name] = attrs.strip()
        elif key in params:  # a key given more than once (SlurmctldHost: primary, backup) keeps its order
            params[key] += "\n" + rest.strip()
        else:
            params[key] = rest.strip()
    return params, nodes, parts


def classify(old: str | None, new: str) -> tuple[SlurmAction, str]:
    """The action a change from ``old`` to ``new`` slurm.conf needs, and why."""
    if old is None:
        return SlurmAction.RESTART, "first configuration"
    if old == new:
        return SlurmAction.NONE, "unchanged"
    op, on, _ = parse_slurm_conf(old)
    np, nn, _ = parse_slurm_conf(new)
    added = sorted(set(nn) - set(on))
    removed = sorted(set(on) - set(nn))
    if added or removed:
        why = []
        if added:
            why.append(f"nodes added: {hostlist.compress(added)}")
        if removed:
            why.append(f"nodes removed: {hostlist.compress(removed)}")
        return SlurmAction.RESTART, "; ".join(why)
    redefined = sorted(n for n in nn if nn[n] != on[n])
    if redefined:
        return SlurmAction.RESTART, f"node definitions changed: {hostlist.compress(redefined)}"
    keys = sorted(k for k in set(op) | set(np) if op.get(k) != np.get(k) and k in RESTART_KEYS)
    if keys:
        return SlurmAction.RESTART, f"parameters that need a restart changed: {', '.join(keys)}"
    return SlurmAction.RECONFIGURE, "partition or live parameters changed"


def removed_nodes(old: str | None, new: str) -> list[str]:
    """Nodes in the old config that the new one drops (they are drained first)."""
    if old is None:
        return []
    return sorted(set(parse_slurm_conf(old)[1]) - set(parse_slurm_conf(new)[1]))
