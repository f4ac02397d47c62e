"""Every spec field's declared update policy, checked against what a change of it really does.

The fields come from the pydantic model itself (``x-update-policy`` of every field, walked
recursively); ``MUTATIONS`` changes each one to another valid value on an example spec. Each change
is planned on simulated nodes that an apply of the example converged (``converged.py``): what the
run does beyond a run of the unchanged spec is classified (daemon restarts and reloads, reboots,
MIG layouts applied only on drained nodes) and held against the policy, with ``plan_rollout``:

- live: nothing drained, nothing refused, no reboot, no step that waits for a drain; a daemon
  restarts or reloads only when a file it reads (or its package) changed, and a daemon that runs
  jobs only where its documentation says a restart leaves running jobs alone (``JOB_DAEMONS``);
- rolling: nothing refused; every node whose steps are more than live-safe is in the drained set;
- rebuild: the change is refused (apply says so before any node is touched, unless forced).
"""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gpuforge.orchestrate.rollout import RolloutPlan, plan_rollout
from gpuforge.render.health import HEALTH_CONFIG
from gpuforge.spec import Role, Spec, resolve_nodes
from gpuforge.spec import load as spec_load
from gpuforge.spec.diff import FieldChange, diff_specs
from gpuforge.spec.model import Spec as SpecModel
from gpuforge.spec.policy import POLICY_KEY, UpdatePolicy
from tests import yaml_text
from tests.converge.converged import ConvergedCluster, PlannedStep, converge
from tests.converge.simulated import write_simulated_spec
from tests.helpers import INVENTORIES

Data = dict[str, Any]

# --------------------------------------------------------------------------- the declared fields


@dataclass(frozen=True)
class DeclaredField:
    """A model field with a declared policy; ``shape`` says what its value is."""

    path: str
    policy: UpdatePolicy
    shape: str
    """``leaf``, ``model`` (a nested model, always present), ``optional-model``, ``list`` or ``dict``
    (of models: items are added and removed as a whole)."""


def _models_in(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The models a field's value holds, each with the path suffix of one item (``[]``, ``{}``)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models_in(a)]
    if origin is list:
        return [(m, "[]" + s) for m, s in _models_in(typing.get_args(annotation)[0])]
    if origin is dict:
        return [(m, "{}" + s) for m, s in _models_in(typing.get_args(annotation)[1])]
    return []


def _shape(annotation: Any, models: list[tuple[type[BaseModel], str]]) -> str:
    if not models:
        return "leaf"
    suffix = models[0][1]
    if suffix:
        return "list" if suffix.startswith("[]") else "dict"
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return "optional-model" if optional else "model"


def declared_fields(model: type[BaseModel] = SpecModel, prefix: str = "") -> Iterator[DeclaredField]:
    """Every field under ``model`` that declares an update policy, parents before children."""
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        models = _models_in(info.annotation)
        declared = extra.get(POLICY_KEY)
        if isinstance(declared, str):
            yield DeclaredField(prefix + name, UpdatePolicy(declared), _shape(info.annotation, models))
        for sub, suffix in models:
            yield from declared_fields(sub, f"{prefix}{name}{suffix}.")


DECLARED = {f.path: f for f in declared_fields()}


def field_path(loc: tuple[str | int, ...]) -> str:
    """The declared field a changed location belongs to, as ``diff.field_policy`` walks it:
    ``("node_groups", "gpu", "hosts")`` -> ``node_groups[].hosts``; a whole item added or removed
    (``("slurm", "qos", "mid")``) is a change of its list, ``slurm.qos``."""
    model: type[BaseModel] | None = SpecModel
    path, at = "", 0
    while model is not None and at < len(loc) and isinstance(loc[at], str) and loc[at] in model.model_fields:
        name = str(loc[at])
        models = _models_in(model.model_fields[name].annotation)
        path, at, model = f"{path}.{name}" if path else name, at + 1, None
        if models:
            sub, suffix = models[0]
            keys = suffix.count("[]") + suffix.count("{}")
            if at + keys >= len(loc):
                break
            path, at, model = path + suffix, at + keys, sub
    return path


def reported_as(path: str) -> str:
    """Where ``diff_specs`` reports a change of ``path``: lists of named items are compared by
    name, so a new name is the old item removed and a new one added, a change of the list."""
    return path.removesuffix("[].name") if path.endswith("[].name") else path


# --------------------------------------------------------------------------- example specs


def _unshared(data: Data) -> Data:
    """The YAML data with its anchors' shared objects copied apart (a change to one group's
    hardware must not change another's that came from the same anchor)."""
    copied: Data = json.loads(json.dumps(data))
    return copied


def _lab() -> Data:
    """inventories/lab.yaml, with an item in each list whose items' fields are changed below."""
    d = _unshared(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))
    d["topology"]["switches"] = [{"name": "spine"}, {"name": "leaf1"}, {"name": "leaf2"}]
    d["slurm"]["qos"].append({"name": "spare", "priority": 5})
    d["monitoring"]["receivers"] = [{"name": "ops", "webhook_url": "http://10.213.0.1:9000/hook"}]
    d["site"] = {"testinfra": [{"path": "checks"}]}
    return d


def _hopper() -> Data:
    """inventories/slurm-h100.yaml cut to 8 nodes: two of each GPU group, one login node."""
    d = _unshared(yaml.safe_load((INVENTORIES / "slurm-h100.yaml").read_text()))
    groups = {g["name"]: g for g in d["node_groups"]}
    groups["gpu"].update(hosts="gpu[001-002]", leaf_switch="leaf1")
    groups["mig"].update(hosts="gpu[061-062]")
    groups["login"].update(hosts="login01")
    # Shared storage: the accounting node serves NFS; the GPU group mounts an export of it, a
    # directory of another server and one the site mounts itself. The second export is mounted
    # nowhere (a rename of it changes only the export table's comment).
    groups["db"]["roles"].append("storage")
    d["storage"] = {
        "exports": [{"name": "shared", "path": "/export/shared"}, {"name": "spare", "path": "/export/spare"}],
        "mounts": [
            {"name": "shared", "path": "/shared", "nodes": "gpu", "export": "shared"},
            {"name": "sw", "path": "/sw", "nodes": "gpu", "server": "192.0.2.5", "remote_path": "/vol/sw"},
            {"name": "site", "path": "/site", "nodes": "gpu", "kind": "external"},
        ],
    }
    return d


def _hopper_on_docker() -> Data:
    """The cut of the H100 spec with docker as its container engine."""
    d = _hopper()
    d["container_runtime"]["engine"] = "docker"
    return d


def _k8s() -> Data:
    return _unshared(yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text()))


def _k8s_fabric() -> Data:
    """The Kubernetes example with InfiniBand on its GPU group: the Network Operator is on by default."""
    d = _k8s()
    _at(d, ("node_groups", "name=gpu"))["fabric"] = {"type": "infiniband"}
    return d


#: The example specs: the lab spec (small and fast) for everything it has, a cut of the H100
#: Slurm spec for GPU nodes under Slurm (pyxis, MPS, MIG, DCGM), the Kubernetes example for Kubernetes.
EXAMPLES: dict[str, Callable[[], Data]] = {
    "lab": _lab,
    "hopper": _hopper,
    "hopper-docker": _hopper_on_docker,
    "k8s": _k8s,
    "k8s-fabric": _k8s_fabric,
}


# --------------------------------------------------------------------------- one change per field


@dataclass(frozen=True)
class Mutation:
    """A change of one field to another valid value on an example spec (``also``: the other
    fields the change must touch to stay valid, e.g. a partition naming a renamed group)."""

    example: str
    change: Callable[[Data], None]
    also: tuple[str, ...] = ()


def _at(d: Data, keys: tuple[str, ...]) -> Any:
    """The value at ``keys`` in the spec data: ``name=<x>`` picks a list's item of that name, a
    number a list's item at that index; a missing mapping is made."""
    target: Any = d
    for key in keys:
        if key.startswith("name="):
            target = next(item for item in target if item["name"] == key[5:])
        elif key.isdigit():
            target = target[int(key)]
        else:
            target = target.setdefault(key, {})
    return target


def setting(*keys: str, **values: Any) -> Callable[[Data], None]:
    """A change that sets ``values`` in the mapping at ``keys``."""
    return lambda d: _at(d, keys).update(values)


def adding(*keys: str, item: Data) -> Callable[[Data], None]:
    """A change that appends ``item`` to the list at ``keys``."""
    return lambda d: _at(d, keys).append(item)


def both(*changes: Callable[[Data], None]) -> Callable[[Data], None]:
    """Changes made one after the other."""

    def change(d: Data) -> None:
        for one in changes:
            one(d)

    return change


def _to_kubernetes(d: Data) -> None:
    d["cluster"]["scheduler"] = "kubernetes"
    del d["slurm"]
    _at(d, ("node_groups", "name=ctl"))["roles"] = ["k8s-control-plane", "monitoring"]
    _at(d, ("node_groups", "name=workers"))["roles"] = ["k8s-worker"]
    d["container_runtime"]["engine"] = "containerd"
    d["kubernetes"] = {"kernel_setup": False}


def _accounting_off(d: Data) -> None:
    d["slurm"]["accounting"] = {"enabled": False}
    d["slurm"]["qos"], d["slurm"]["accounts"] = [], []
    _at(d, ("node_groups", "name=ctl"))["roles"].remove("accounting-db")


def _addresses(d: Data) -> None:
    workers = _at(d, ("node_groups", "name=workers"))
    del workers["address_start"]
    workers["addresses"] = ["10.213.0.22", "10.213.0.23"]


def _pointing_ssh_at_the_spare_file(field: str) -> Callable[[Data], None]:
    """ssh.key or ssh.known_hosts set to the second readable file of the example's folder."""
    return lambda d: d["ssh"].update({field: str(Path(d["ssh"][field]).with_name("spare"))})


def _bundle_dir_at_the_example_folder(d: Data) -> None:
    d["sources"]["bundle_dir"] = str(Path(d["ssh"]["key"]).parent)


#: A version 4 OpenPGP fingerprint (a site mirror's or the offline bundle's signing key).
FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"
WORKERS = ("node_groups", "name=workers")
GPU_HW = ("node_groups", "name=gpu", "hardware")
BATCH = ("slurm", "partitions", "name=batch")
VISION = ("kubernetes", "batch_queue", "tenants", "name=vision")
DRIVER_UPGRADE = ("kubernetes", "gpu_operator", "driver_upgrade")
NET_OP = ("kubernetes", "network_operator")
INFERENCE = ("mig", "configs", "inference")
OPS_RECEIVER = ("monitoring", "receivers", "name=ops")
SHARED_EXPORT = ("storage", "exports", "name=shared")
SHARED_MOUNT = ("storage", "mounts", "name=shared")

GPU_FABRIC = ("node_groups", "name=gpu", "fabric")
MIG_FABRIC = ("node_groups", "name=mig", "fabric")
DOCA_MIRROR = "http://192.0.2.6/doca/3.2.1/{distro}/{arch}"
DOCA_ALSO = ("node_groups[].fabric.doca_key_fingerprint", "sources.mirrors.doca")


def _to_doca(d: Data) -> None:
    """The MIG group's fabric on DOCA-OFED 3.2.1 from a site mirror (with the key it is signed with)."""
    _at(d, MIG_FABRIC).update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    d["sources"]["mirrors"]["doca"] = DOCA_MIRROR


#: A Redfish BMC per worker (documentation addresses): only ``gpuforge power`` reads it.
BMC = {"address_start": "198.51.100.21", "credentials_file": "bmc.cred", "tls_fingerprint": "ab" * 32}

M = Mutation
MUTATIONS: dict[str, Mutation] = {
    # cluster
    "cluster.name": M("lab", setting("cluster", name="gflab2")),
    "cluster.scheduler": M(
        "lab", _to_kubernetes, ("node_groups[].roles", "container_runtime.engine", "slurm", "kubernetes")
    ),
    "cluster.os": M("lab", setting("cluster", os="ubuntu24.04")),
    "cluster.domain": M("lab", setting("cluster", domain="lab.example.org")),
    # ssh
    "ssh.user": M("lab", setting("ssh", user="admin")),
    "ssh.port": M("lab", setting("ssh", port=2222)),
    "ssh.key": M("lab", _pointing_ssh_at_the_spare_file("key")),
    "ssh.known_hosts": M("lab", _pointing_ssh_at_the_spare_file("known_hosts")),
    "ssh.sudo": M("lab", setting("ssh", sudo=True)),
    # sources
    "sources.mode": M("lab", setting("sources", mode="upstream")),
    "sources.apt_proxy": M("lab", setting("sources", apt_proxy="http://10.213.0.1:3143")),
    "sources.apt_translations": M("lab", setting("sources", apt_translations=True)),
    "sources.mirrors.debian": M("lab", setting("sources", "mirrors", debian="http://10.213.0.1/debian")),
    "sources.mirrors.ubuntu": M("k8s", setting("sources", "mirrors", ubuntu="http://192.0.2.5/ubuntu")),
    "sources.mirrors.nvidia_cuda": M(
        "hopper", setting("sources", "mirrors", nvidia_cuda="http://192.0.2.6/nvidia/cuda/ubuntu2404/x86_64")
    ),
    "sources.mirrors.nvidia_container": M(
        "hopper", setting("sources", "mirrors", nvidia_container="http://192.0.2.6/libnvidia-container/deb/amd64")
    ),
    "sources.mirrors.artifacts": M("hopper", setting("sources", "mirrors", artifacts="http://192.0.2.6/artifacts")),
    "sources.mirrors.epel": M("lab", setting("sources", "mirrors", epel="http://10.213.0.1/epel/9")),
    "sources.mirrors.docker_ce": M("lab", setting("sources", "mirrors", docker_ce="http://10.213.0.1/docker-ce")),
    "sources.mirrors.kubernetes": M("k8s", setting("sources", "mirrors", kubernetes="http://192.0.2.5/kubernetes")),
    "sources.mirrors.helm": M("k8s", setting("sources", "mirrors", helm="http://192.0.2.5/helm")),
    "sources.mirrors.registry": M("k8s", setting("sources", "mirrors", registry="registry.example.org:5000")),
    "sources.bundle_dir": M("lab", _bundle_dir_at_the_example_folder),
    "sources.bundle_fingerprint": M("lab", setting("sources", bundle_fingerprint=FINGERPRINT)),
    "sources.artifact_sha256": M("hopper", setting("sources", artifact_sha256={"enroot_4.1.2-1_amd64.deb": "ab" * 32})),
    "sources.mirror_keys.nvidia_cuda": M("hopper", setting("sources", "mirror_keys", nvidia_cuda=FINGERPRINT)),
    "sources.mirror_keys.nvidia_container": M(
        "hopper", setting("sources", "mirror_keys", nvidia_container=FINGERPRINT)
    ),
    "sources.mirror_keys.epel": M("lab", setting("sources", "mirror_keys", epel=FINGERPRINT)),
    "sources.mirror_keys.docker_ce": M("lab", setting("sources", "mirror_keys", docker_ce=FINGERPRINT)),
    "sources.mirror_keys.kubernetes": M("k8s", setting("sources", "mirror_keys", kubernetes=FINGERPRINT)),
    # versions
    "versions.driver": M("lab", lambda d: d["versions"].pop("driver")),
    "versions.driver.version": M("hopper", setting("versions", "driver", version="570.172.08")),
    "versions.driver.flavor": M("hopper", setting("versions", "driver", flavor="proprietary")),
    "versions.driver.source": M("hopper", setting("versions", "driver", source="distro")),
    "versions.driver.fabric_manager": M("hopper", setting("versions", "driver", fabric_manager="580.173.02")),
    "versions.cuda_toolkit": M("hopper", setting("versions", cuda_toolkit="12.6")),
    "versions.container_toolkit": M("hopper", setting("versions", container_toolkit="1.17.9")),
    "versions.enroot": M("hopper", setting("versions", enroot="3.5.1")),
    "versions.pyxis": M("hopper", setting("versions", pyxis="0.21.0")),
    "versions.dcgm": M(
        "hopper", setting("versions", dcgm="4.4.1", dcgm_exporter="4.4.1-4.6.0"), ("versions.dcgm_exporter",)
    ),
    "versions.dcgm_exporter": M("hopper", setting("versions", dcgm_exporter="4.6.0-4.7.0")),
    "versions.mig_manager": M("hopper", setting("versions", mig_manager="0.10.0")),
    "versions.slurm": M("lab", setting("versions", slurm="22.05.8-4+deb12u3")),
    "versions.kubernetes": M("k8s", setting("versions", kubernetes="1.36.5")),
    "versions.gpu_operator": M("k8s", setting("versions", gpu_operator="v26.7.1")),
    "versions.helm": M("k8s", setting("versions", helm="3.16.4")),
    # node groups
    "node_groups": M(
        "lab",
        adding(
            "node_groups",
            item={
                "name": "extra",
                "hosts": "node4",
                "address_start": "10.213.0.14",
                "roles": ["compute"],
                "leaf_switch": "leaf1",
                "hardware": {"sockets": 1, "cores_per_socket": 1, "threads_per_core": 1, "real_memory_mb": 1000},
            },
        ),
    ),
    "node_groups[].name": M(
        "lab",
        both(setting(*WORKERS, name="compute"), setting(*BATCH, nodes="ctl,compute")),
        ("slurm.partitions[].nodes",),
    ),
    "node_groups[].hosts": M("lab", setting(*WORKERS, hosts="node[2-4]")),
    "node_groups[].address_start": M("lab", setting(*WORKERS, address_start="10.213.0.22")),
    "node_groups[].addresses": M("lab", _addresses, ("node_groups[].address_start",)),
    "node_groups[].roles": M("lab", setting(*WORKERS, roles=["compute", "login"])),
    "node_groups[].hardware.gpu": M("lab", setting(*WORKERS, "hardware", gpu={"model": "H100-80GB", "count": 1})),
    "node_groups[].hardware.gpu.model": M("hopper", setting(*GPU_HW, "gpu", model="H200-141GB")),
    "node_groups[].hardware.gpu.count": M("hopper", setting(*GPU_HW, "gpu", count=4)),
    "node_groups[].hardware.nvswitch": M("hopper", setting(*GPU_HW, nvswitch=False)),
    "node_groups[].hardware.sockets": M("lab", setting(*WORKERS, "hardware", sockets=2)),
    "node_groups[].hardware.cores_per_socket": M("lab", setting(*WORKERS, "hardware", cores_per_socket=2)),
    "node_groups[].hardware.threads_per_core": M("lab", setting(*WORKERS, "hardware", threads_per_core=2)),
    "node_groups[].hardware.real_memory_mb": M("lab", setting(*WORKERS, "hardware", real_memory_mb=2000)),
    "node_groups[].os": M("lab", setting(*WORKERS, os="ubuntu22.04")),
    "node_groups[].arch": M("hopper", setting("node_groups", "name=login", arch="aarch64")),
    "node_groups[].leaf_switch": M("lab", setting(*WORKERS, leaf_switch="leaf2")),
    "node_groups[].bmc": M("lab", setting(*WORKERS, bmc=BMC)),
    "node_groups[].mig_config": M("hopper", setting("node_groups", "name=gpu", mig_config="inference")),
    # topology, time
    "topology.switches": M("lab", adding("topology", "switches", item={"name": "leaf3", "parent": "spine"})),
    "topology.switches[].name": M("lab", setting("topology", "switches", "name=leaf2", name="leaf3")),
    "topology.switches[].parent": M("lab", setting("topology", "switches", "name=leaf1", parent="spine")),
    "time_sync.enabled": M("lab", setting("time_sync", enabled=True)),
    "time_sync.servers": M("hopper", setting("time_sync", servers=["192.0.2.2"])),
    # container runtime
    "container_runtime.engine": M("hopper", setting("container_runtime", engine="docker")),
    "container_runtime.nvidia_default": M("hopper", setting("container_runtime", nvidia_default=True)),
    "container_runtime.cdi": M("hopper", setting("container_runtime", cdi=False)),
    # slurm
    "slurm.config_mode": M("lab", setting("slurm", config_mode="configless")),
    "slurm.process_tracking": M("lab", setting("slurm", process_tracking="cgroup")),
    "slurm.partitions": M("lab", adding("slurm", "partitions", item={"name": "debug", "nodes": "workers"})),
    "slurm.partitions[].name": M("lab", setting(*BATCH, name="main")),
    "slurm.partitions[].nodes": M("lab", setting(*BATCH, nodes="workers")),
    "slurm.partitions[].default": M(
        "lab",
        both(
            setting(*BATCH, default=False),
            adding("slurm", "partitions", item={"name": "debug", "nodes": "workers", "default": True}),
        ),
        ("slurm.partitions",),
    ),
    "slurm.partitions[].max_time": M("lab", setting(*BATCH, max_time="2:00:00")),
    "slurm.partitions[].default_time": M("lab", setting(*BATCH, default_time="30:00")),
    "slurm.partitions[].max_nodes": M("lab", setting(*BATCH, max_nodes=2)),
    "slurm.partitions[].priority_tier": M("lab", setting(*BATCH, priority_tier=5)),
    "slurm.partitions[].qos": M("lab", setting(*BATCH, qos="high")),
    "slurm.partitions[].allow_accounts": M("lab", setting(*BATCH, allow_accounts=["research"])),
    "slurm.partitions[].oversubscribe": M("lab", setting(*BATCH, oversubscribe="YES")),
    "slurm.qos": M("lab", adding("slurm", "qos", item={"name": "mid", "priority": 100})),
    "slurm.qos[].name": M("lab", setting("slurm", "qos", "name=spare", name="spare2")),
    "slurm.qos[].priority": M("lab", setting("slurm", "qos", "name=low", priority=20)),
    "slurm.qos[].preempt": M("lab", setting("slurm", "qos", "name=high", preempt=["low", "spare"])),
    "slurm.qos[].preempt_mode": M("lab", setting("slurm", "qos", "name=high", preempt_mode="cancel")),
    "slurm.qos[].grp_gpus": M("lab", setting("slurm", "qos", "name=high", grp_gpus=8)),
    "slurm.qos[].max_gpus_per_user": M("lab", setting("slurm", "qos", "name=high", max_gpus_per_user=4)),
    "slurm.qos[].max_wall": M("lab", setting("slurm", "qos", "name=low", max_wall="2:00:00")),
    "slurm.accounts": M("lab", adding("slurm", "accounts", item={"name": "extra", "fairshare": 1})),
    "slurm.accounts[].name": M("lab", setting("slurm", "accounts", "name=ops", name="operations")),
    "slurm.accounts[].description": M("lab", setting("slurm", "accounts", "name=research", description="groups")),
    "slurm.accounts[].organization": M("lab", setting("slurm", "accounts", "name=research", organization="lab")),
    "slurm.accounts[].parent": M("lab", setting("slurm", "accounts", "name=ops", parent="research")),
    "slurm.accounts[].fairshare": M("lab", setting("slurm", "accounts", "name=research", fairshare=20)),
    "slurm.accounts[].users": M("lab", setting("slurm", "accounts", "name=research", users=["alice"])),
    "slurm.accounts[].qos": M("lab", setting("slurm", "accounts", "name=research", qos=["normal", "low", "high"])),
    "slurm.accounts[].default_qos": M("lab", setting("slurm", "accounts", "name=research", default_qos="low")),
    "slurm.users": M("lab", adding("slurm", "users", item={"name": "dave", "uid": 2004})),
    "slurm.users[].name": M("lab", setting("slurm", "users", "name=carol", name="carla")),
    "slurm.users[].uid": M("lab", setting("slurm", "users", "name=alice", uid=2011)),
    "slurm.users[].gid": M("lab", setting("slurm", "users", "name=alice", gid=3001)),
    "slurm.users[].shell": M("lab", setting("slurm", "users", "name=alice", shell="/bin/sh")),
    "slurm.preempt_mode": M("lab", setting("slurm", preempt_mode="cancel")),
    "slurm.accounting.enabled": M("lab", _accounting_off, ("node_groups[].roles", "slurm.qos", "slurm.accounts")),
    "slurm.accounting.database": M("lab", setting("slurm", "accounting", database="acct")),
    "slurm.accounting.db_user": M("lab", setting("slurm", "accounting", db_user="acct")),
    "slurm.accounting.enforce": M("lab", setting("slurm", "accounting", enforce=["associations", "limits", "safe"])),
    "slurm.priority.weight_fairshare": M("lab", setting("slurm", "priority", weight_fairshare=500)),
    "slurm.priority.weight_age": M("lab", setting("slurm", "priority", weight_age=5)),
    "slurm.priority.weight_qos": M("lab", setting("slurm", "priority", weight_qos=5)),
    "slurm.priority.weight_job_size": M("lab", setting("slurm", "priority", weight_job_size=5)),
    "slurm.priority.weight_partition": M("lab", setting("slurm", "priority", weight_partition=5)),
    "slurm.priority.decay_half_life": M("lab", setting("slurm", "priority", decay_half_life="14-0")),
    "slurm.health_check.enabled": M("lab", setting("slurm", "health_check", enabled=False)),
    "slurm.health_check.interval": M("lab", setting("slurm", "health_check", interval=600)),
    "slurm.health_check.node_state": M("lab", setting("slurm", "health_check", node_state="IDLE")),
    "slurm.cgroups.constrain_cores": M("hopper", setting("slurm", "cgroups", constrain_cores=False)),
    "slurm.cgroups.constrain_devices": M("hopper", setting("slurm", "cgroups", constrain_devices=False)),
    "slurm.cgroups.constrain_ram_space": M("hopper", setting("slurm", "cgroups", constrain_ram_space=False)),
    "slurm.mps.enabled": M("hopper", setting("slurm", "mps", enabled=True)),
    "slurm.mps.shares_per_gpu": M(
        "hopper", setting("slurm", "mps", enabled=True, shares_per_gpu=200), ("slurm.mps.enabled",)
    ),
    "slurm.containers.enroot": M("hopper", setting("slurm", "containers", enroot=False)),
    "slurm.containers.pyxis": M("hopper", setting("slurm", "containers", pyxis=False)),
    "slurm.propagate_resource_limits_except": M("lab", setting("slurm", propagate_resource_limits_except=["MEMLOCK"])),
    "slurm.extra_config": M("lab", setting("slurm", extra_config={"MessageTimeout": "20"})),
    "slurm.state_save_location": M("lab", setting("slurm", state_save_location="/var/lib/slurm/state")),
    "slurm.failover.slurmctld_timeout": M("lab", setting("slurm", "failover", slurmctld_timeout=240)),
    "slurm.failover.slurmd_timeout": M("lab", setting("slurm", "failover", slurmd_timeout=600)),
    "slurm.source": M("hopper", setting("slurm", source="site")),
    # kubernetes
    "kubernetes.pod_cidr": M("k8s", setting("kubernetes", pod_cidr="10.245.0.0/16")),
    "kubernetes.service_cidr": M("k8s", setting("kubernetes", service_cidr="10.112.0.0/12")),
    "kubernetes.cni.plugin": M("k8s", setting("kubernetes", "cni", plugin="calico")),
    "kubernetes.cni.version": M("k8s", setting("kubernetes", "cni", version="v0.26.2")),
    "kubernetes.gpu_operator.driver": M("k8s", setting("kubernetes", "gpu_operator", driver="operator")),
    "kubernetes.gpu_operator.toolkit": M("k8s", setting("kubernetes", "gpu_operator", toolkit="operator")),
    "kubernetes.gpu_operator.mig_strategy": M("k8s", setting("kubernetes", "gpu_operator", mig_strategy="single")),
    "kubernetes.gpu_operator.time_slicing_replicas": M(
        "k8s", setting("kubernetes", "gpu_operator", time_slicing_replicas=4)
    ),
    "kubernetes.gpu_operator.dcgm_exporter": M(
        "k8s",
        both(setting("kubernetes", "gpu_operator", dcgm_exporter=True), setting("dcgm", enabled=False, exporter=False)),
        ("dcgm.enabled", "dcgm.exporter"),
    ),
    "kubernetes.gpu_operator.namespace": M("k8s", setting("kubernetes", "gpu_operator", namespace="gpu-ops")),
    "kubernetes.batch_queue.kind": M(
        "k8s",
        setting("kubernetes", "batch_queue", kind="volcano", version="v1.10.0"),
        ("kubernetes.batch_queue.version",),
    ),
    "kubernetes.batch_queue.version": M("k8s", setting("kubernetes", "batch_queue", version="v0.19.3")),
    "kubernetes.batch_queue.tenants": M(
        "k8s",
        adding(
            "kubernetes", "batch_queue", "tenants", item={"name": "audio", "namespace": "team-audio", "gpu_quota": 8}
        ),
    ),
    "kubernetes.batch_queue.tenants[].name": M("k8s", setting(*VISION, name="imaging")),
    "kubernetes.batch_queue.tenants[].namespace": M("k8s", setting(*VISION, namespace="team-imaging")),
    "kubernetes.batch_queue.tenants[].gpu_quota": M("k8s", setting(*VISION, gpu_quota=24)),
    "kubernetes.batch_queue.tenants[].cpu_quota": M("k8s", setting(*VISION, cpu_quota=128)),
    "kubernetes.batch_queue.tenants[].memory_quota_gi": M("k8s", setting(*VISION, memory_quota_gi=1024)),
    "kubernetes.batch_queue.tenants[].borrowing_limit": M("k8s", setting(*VISION, borrowing_limit=8)),
    "kubernetes.kernel_setup": M("k8s", setting("kubernetes", kernel_setup=False)),
    "kubernetes.api_endpoint.type": M("k8s", setting("kubernetes", "api_endpoint", type="external")),
    "kubernetes.api_endpoint.address": M("k8s", setting("kubernetes", "api_endpoint", address="198.51.100.8")),
    "kubernetes.api_endpoint.interface": M("k8s", setting("kubernetes", "api_endpoint", interface="ens2f0")),
    "kubernetes.api_endpoint.version": M("k8s", setting("kubernetes", "api_endpoint", version="v1.2.2")),
    "kubernetes.node_interface": M("k8s", setting("kubernetes", node_interface="ens2f0")),
    "kubernetes.certificates.enabled": M("k8s", setting("kubernetes", "certificates", enabled=False)),
    "kubernetes.certificates.renew_days_before": M("k8s", setting("kubernetes", "certificates", renew_days_before=90)),
    "kubernetes.certificates.warn_days": M("k8s", setting("kubernetes", "certificates", warn_days=14)),
    "kubernetes.etcd_snapshots.enabled": M("k8s", setting("kubernetes", "etcd_snapshots", enabled=False)),
    "kubernetes.etcd_snapshots.schedule": M("k8s", setting("kubernetes", "etcd_snapshots", schedule="hourly")),
    "kubernetes.etcd_snapshots.keep": M("k8s", setting("kubernetes", "etcd_snapshots", keep=30)),
    "kubernetes.etcd_snapshots.directory": M("k8s", setting("kubernetes", "etcd_snapshots", directory="/srv/etcd")),
    "kubernetes.batch_queue.manage_jobs_without_queue_name": M(
        "k8s", setting("kubernetes", "batch_queue", manage_jobs_without_queue_name=False)
    ),
    "kubernetes.batch_queue.tenants[].mig_quota": M("k8s", setting(*VISION, mig_quota={"1g.10gb": 10})),
    "kubernetes.gpu_operator.driver_upgrade.auto_upgrade": M("k8s", setting(*DRIVER_UPGRADE, auto_upgrade=False)),
    "kubernetes.gpu_operator.driver_upgrade.max_parallel_upgrades": M(
        "k8s", setting(*DRIVER_UPGRADE, max_parallel_upgrades=2)
    ),
    "kubernetes.gpu_operator.driver_upgrade.max_unavailable": M("k8s", setting(*DRIVER_UPGRADE, max_unavailable="2")),
    "kubernetes.gpu_operator.driver_upgrade.pod_deletion_timeout_s": M(
        "k8s", setting(*DRIVER_UPGRADE, pod_deletion_timeout_s=600)
    ),
    "kubernetes.gpu_operator.driver_upgrade.drain": M("k8s", setting(*DRIVER_UPGRADE, drain=True)),
    "kubernetes.gpu_operator.driver_upgrade.drain_timeout_s": M("k8s", setting(*DRIVER_UPGRADE, drain_timeout_s=900)),
    "kubernetes.gpu_operator.driver_upgrade.wait_minutes": M("k8s", setting(*DRIVER_UPGRADE, wait_minutes=30)),
    "kubernetes.frameworks.kuberay.enabled": M("k8s", setting("kubernetes", "frameworks", "kuberay", enabled=False)),
    "kubernetes.frameworks.kuberay.version": M("k8s", setting("kubernetes", "frameworks", "kuberay", version="1.4.2")),
    "kubernetes.frameworks.kuberay.namespace": M(
        "k8s", setting("kubernetes", "frameworks", "kuberay", namespace="ray-system")
    ),
    "kubernetes.network_operator.enabled": M("k8s-fabric", setting(*NET_OP, enabled=False)),
    "kubernetes.network_operator.namespace": M("k8s-fabric", setting(*NET_OP, namespace="network-operator")),
    "kubernetes.network_operator.resource_name": M("k8s-fabric", setting(*NET_OP, resource_name="ib_fabric")),
    "kubernetes.network_operator.rdma_hca_max": M("k8s-fabric", setting(*NET_OP, rdma_hca_max=8)),
    "kubernetes.network_operator.if_names": M("k8s-fabric", setting(*NET_OP, if_names=["ibp24s0"])),
    "kubernetes.network_operator.peermem": M("k8s-fabric", setting(*NET_OP, peermem=False)),
    "kubernetes.network_operator.wait_minutes": M("k8s-fabric", setting(*NET_OP, wait_minutes=30)),
    "kubernetes.frameworks.trainer.enabled": M("k8s", setting("kubernetes", "frameworks", "trainer", enabled=False)),
    "kubernetes.frameworks.trainer.version": M("k8s", setting("kubernetes", "frameworks", "trainer", version="2.2.1")),
    "kubernetes.frameworks.trainer.namespace": M(
        "k8s", setting("kubernetes", "frameworks", "trainer", namespace="trainer-system")
    ),
    # MIG layouts
    "mig.configs": M("hopper", setting("mig", "configs", train=[{"devices": "all", "mig_devices": {"3g.40gb": 2}}])),
    "mig.configs{}[].devices": M("hopper", setting(*INFERENCE, "0", devices=[0, 1])),
    "mig.configs{}[].mig_enabled": M(
        "hopper", setting(*INFERENCE, "1", mig_enabled=False, mig_devices={}), ("mig.configs{}[].mig_devices",)
    ),
    "mig.configs{}[].mig_devices": M("hopper", setting(*INFERENCE, "0", mig_devices={"2g.20gb": 3})),
    # DCGM
    "dcgm.enabled": M("hopper", setting("dcgm", enabled=False, exporter=False), ("dcgm.exporter",)),
    "dcgm.exporter": M("hopper", setting("dcgm", exporter=False)),
    "dcgm.exporter_port": M("hopper", setting("dcgm", exporter_port=9401)),
    "dcgm.counters": M("hopper", setting("dcgm", counters=["DCGM_FI_DEV_GPU_TEMP"])),
    "dcgm.diag_level": M("hopper", setting("dcgm", diag_level=2)),
    # monitoring
    "monitoring.prometheus": M("lab", setting("monitoring", prometheus=False)),
    "monitoring.prometheus_port": M("lab", setting("monitoring", prometheus_port=9091)),
    "monitoring.scrape_interval": M("lab", setting("monitoring", scrape_interval="30s")),
    "monitoring.node_exporter": M("lab", setting("monitoring", node_exporter=False)),
    "monitoring.node_exporter_port": M("lab", setting("monitoring", node_exporter_port=9101)),
    "monitoring.retention": M("lab", setting("monitoring", retention="30d")),
    "monitoring.alertmanager": M("lab", setting("monitoring", alertmanager=False)),
    "monitoring.alertmanager_port": M("lab", setting("monitoring", alertmanager_port=9094)),
    "monitoring.receivers": M(
        "lab", adding("monitoring", "receivers", item={"name": "pager", "webhook_url": "http://10.213.0.1:9001/page"})
    ),
    "monitoring.receivers[].name": M("lab", setting(*OPS_RECEIVER, name="oncall")),
    "monitoring.receivers[].webhook_url": M("lab", setting(*OPS_RECEIVER, webhook_url="http://10.213.0.1:9000/other")),
    "monitoring.receivers[].email": M(
        "lab",
        both(
            setting(*OPS_RECEIVER, email="ops@example.org"),
            setting("monitoring", smtp_smarthost="10.213.0.1:25", smtp_from="gf@example.org"),
        ),
        ("monitoring.smtp_smarthost", "monitoring.smtp_from"),
    ),
    "monitoring.smtp_smarthost": M("lab", setting("monitoring", smtp_smarthost="10.213.0.1:25")),
    "monitoring.smtp_from": M("lab", setting("monitoring", smtp_from="gf@example.org")),
    "monitoring.group_wait": M("lab", setting("monitoring", group_wait="1m")),
    "monitoring.group_interval": M("lab", setting("monitoring", group_interval="10m")),
    "monitoring.repeat_interval": M("lab", setting("monitoring", repeat_interval="12h")),
    "monitoring.alerts.gpu_temp_c": M("lab", setting("monitoring", "alerts", gpu_temp_c=85)),
    "monitoring.alerts.gpu_power_w": M("lab", setting("monitoring", "alerts", gpu_power_w=650)),
    "monitoring.alerts.xids": M("lab", setting("monitoring", "alerts", xids=[31])),
    "monitoring.alerts.check_failing_minutes": M("lab", setting("monitoring", "alerts", check_failing_minutes=20)),
    "monitoring.alerts.node_down_minutes": M("lab", setting("monitoring", "alerts", node_down_minutes=5)),
    "monitoring.alerts.disk_used_percent": M("lab", setting("monitoring", "alerts", disk_used_percent=95)),
    "monitoring.alerts.operator_reasons": M("lab", setting("monitoring", "alerts", operator_reasons=["ops:"])),
    "monitoring.slurm_collector_interval": M("lab", setting("monitoring", slurm_collector_interval=120)),
    "monitoring.grafana_datasource": M("lab", setting("monitoring", grafana_datasource="prom")),
    # storage
    "storage.exports": M("hopper", adding("storage", "exports", item={"name": "data", "path": "/export/data"})),
    "storage.exports[].name": M("hopper", setting("storage", "exports", "name=spare", name="reserve")),
    "storage.exports[].path": M("hopper", setting(*SHARED_EXPORT, path="/export/common")),
    "storage.exports[].options": M("hopper", setting(*SHARED_EXPORT, options=["rw", "sync", "root_squash"])),
    "storage.mounts": M(
        "hopper",
        adding("storage", "mounts", item={"name": "data", "path": "/data", "nodes": "gpu", "export": "spare"}),
    ),
    "storage.mounts[].name": M("hopper", setting(*SHARED_MOUNT, name="common")),
    "storage.mounts[].path": M("hopper", setting(*SHARED_MOUNT, path="/common")),
    "storage.mounts[].nodes": M("hopper", setting(*SHARED_MOUNT, nodes="gpu,mig")),
    "storage.mounts[].kind": M(
        "hopper",
        setting("storage", "mounts", "name=site", kind="nfs", server="192.0.2.5", remote_path="/vol/site"),
        ("storage.mounts[].server", "storage.mounts[].remote_path"),
    ),
    "storage.mounts[].export": M("hopper", setting(*SHARED_MOUNT, export="spare")),
    "storage.mounts[].server": M("hopper", setting("storage", "mounts", "name=sw", server="192.0.2.6")),
    "storage.mounts[].remote_path": M("hopper", setting("storage", "mounts", "name=sw", remote_path="/vol/tools")),
    "storage.mounts[].options": M("hopper", setting(*SHARED_MOUNT, options=["hard", "noatime", "vers=4.2"])),
    "storage.mounts[].writable": M("hopper", setting(*SHARED_MOUNT, writable=False)),
    "storage.mounts[].timeout_s": M("hopper", setting(*SHARED_MOUNT, timeout_s=60)),
    # fabric (the H100 example's GPU group: InfiniBand, IPoIB, NCCL; its MIG group: InfiniBand, NCCL)
    "sources.mirrors.doca": M("hopper", setting("sources", "mirrors", doca=DOCA_MIRROR)),
    "node_groups[].fabric": M("hopper", setting("node_groups", "name=login", fabric={"type": "infiniband"})),
    "node_groups[].fabric.type": M("hopper", setting(*MIG_FABRIC, type="roce")),
    "node_groups[].fabric.stack": M("hopper", _to_doca, (*DOCA_ALSO, "node_groups[].fabric.doca_version")),
    "node_groups[].fabric.doca_version": M("hopper", _to_doca, (*DOCA_ALSO, "node_groups[].fabric.stack")),
    "node_groups[].fabric.doca_key_fingerprint": M("hopper", setting(*MIG_FABRIC, doca_key_fingerprint=FINGERPRINT)),
    "node_groups[].fabric.hcas": M("hopper", setting(*GPU_FABRIC, hcas=["mlx5_0", "mlx5_1"])),
    "node_groups[].fabric.soft_roce": M(
        "hopper", setting(*MIG_FABRIC, type="roce", soft_roce=["eth1"]), ("node_groups[].fabric.type",)
    ),
    "node_groups[].fabric.link_rate_gbps": M("hopper", setting(*GPU_FABRIC, link_rate_gbps=200)),
    "node_groups[].fabric.firmware": M("hopper", setting(*GPU_FABRIC, firmware="28.39.1002")),
    "node_groups[].fabric.peermem": M("hopper", setting(*GPU_FABRIC, peermem=True)),
    "node_groups[].fabric.gdrcopy": M("hopper", setting(*GPU_FABRIC, gdrcopy=True)),
    "node_groups[].fabric.gdrcopy_version": M("hopper", setting(*GPU_FABRIC, gdrcopy_version="2.5-1")),
    "node_groups[].fabric.nccl": M("hopper", setting(*GPU_FABRIC, nccl="2.27.3-1")),
    "node_groups[].fabric.nccl_cuda": M("hopper", setting(*GPU_FABRIC, nccl_cuda="12.8")),
    "node_groups[].fabric.nccl_tests": M("hopper", setting(*GPU_FABRIC, nccl_tests=True)),
    "node_groups[].fabric.nccl_tests_version": M("hopper", setting(*GPU_FABRIC, nccl_tests_version="2.20.0")),
    "node_groups[].fabric.sharp_plugin": M(
        "hopper",
        both(_to_doca, setting(*MIG_FABRIC, sharp_plugin="2.1.0")),
        (*DOCA_ALSO, "node_groups[].fabric.stack", "node_groups[].fabric.doca_version"),
    ),
    "node_groups[].fabric.mpi": M("hopper", setting(*MIG_FABRIC, mpi="none")),
    "node_groups[].fabric.roce": M(
        "hopper",
        both(_to_doca, setting(*MIG_FABRIC, type="roce", roce={"pfc": [3]})),
        (*DOCA_ALSO, "node_groups[].fabric.stack", "node_groups[].fabric.doca_version", "node_groups[].fabric.type"),
    ),
    "node_groups[].fabric.ipoib": M("hopper", setting(*GPU_FABRIC, ipoib=None)),
    "node_groups[].fabric.ipoib.interface": M("hopper", setting(*GPU_FABRIC, "ipoib", interface="ib1")),
    "node_groups[].fabric.ipoib.address_start": M(
        "hopper", setting(*GPU_FABRIC, "ipoib", address_start="10.21.0.101/16")
    ),
    "node_groups[].fabric.thresholds.write_bw_gbps": M("hopper", setting(*GPU_FABRIC, "thresholds", write_bw_gbps=300)),
    "node_groups[].fabric.thresholds.read_lat_us": M("hopper", setting(*GPU_FABRIC, "thresholds", read_lat_us=5.0)),
    "node_groups[].fabric.thresholds.write_bw_seconds": M(
        "hopper", setting(*GPU_FABRIC, "thresholds", write_bw_seconds=20)
    ),
    "node_groups[].fabric.thresholds.write_bw_iterations": M(
        "hopper", setting(*GPU_FABRIC, "thresholds", write_bw_iterations=500)
    ),
    "node_groups[].fabric.thresholds.nccl_busbw_gbps": M(
        "hopper", setting(*GPU_FABRIC, "thresholds", nccl_busbw_gbps=300)
    ),
    # rollout
    "rollout.batch_size": M("lab", setting("rollout", batch_size=2)),
    "rollout.drain_timeout": M("lab", setting("rollout", drain_timeout=600)),
    # site
    "site.testinfra": M("lab", adding("site", "testinfra", item={"path": "checks", "targets": ["compute"]})),
    "site.testinfra[].path": M("lab", setting("site", "testinfra", "0", path="checks/test_more.py")),
    "site.testinfra[].targets": M("lab", setting("site", "testinfra", "0", targets=["compute"])),
}

ROCE_EXEMPT = (
    "RoCE QoS needs DOCA-OFED (mlnx_qos), and an example applied with DOCA would fetch DOCA's key in every "
    "baseline run of the simulated nodes (its key file is fetched on the node, not rendered): the whole section's "
    "mutation (node_groups[].fabric.roce) covers it; each setting only rewrites the QoS script, which restarts "
    "its oneshot unit (tests/fabric/test_fabric_deploy.py), rolling like the section"
)

#: Fields with a policy and no mutation, each with the reason.
EXEMPT: dict[str, str] = {
    "slurm.gpu_autodetect": (
        "no example can change it alone: the GPU example's MIG group needs nvml (spec rule slurm_gpu_rules), "
        "so every valid change also drops node_groups[].mig_config, whose own mutation covers that drain; "
        "gres.conf alone restarts slurmd (slurm layer SLURMD_FILES), as cgroup.conf does"
    ),
    "slurm": "present exactly when cluster.scheduler (rebuild) is slurm: it cannot come or go on its own",
    "kubernetes": "present exactly when cluster.scheduler (rebuild) is kubernetes: it cannot come or go on its own",
    "kubernetes.api_endpoint": "required with more than one control plane (spec rule kubeadm_rules), as the "
    "example has: it cannot come or go there; its fields each have their own mutation",
    "node_groups[].connector": "how the control host reaches a group's nodes (ssh, or Vagrant's ssh-config): "
    "nothing on a node reads it, and a simulated run has no Vagrant machines to resolve",
    "node_groups[].fabric.roce.trust": ROCE_EXEMPT,
    "node_groups[].fabric.roce.pfc": ROCE_EXEMPT,
    "node_groups[].fabric.roce.ecn": ROCE_EXEMPT,
    "kubernetes.network_operator.version": "gpuforge knows the component images of one Network Operator release "
    "(26.4.1; spec rule network_operator_rules): no other value is valid yet. A change is a helm upgrade of the "
    "operator and a re-applied NicClusterPolicy on the first control plane (tests/network_operator/test_deploy.py); "
    "rolling, since with ofed_driver the release's DOCA driver container reloads the HCAs' kernel modules",
    "kubernetes.network_operator.ofed_driver": "needs stack: doca on every Kubernetes fabric group, and an example "
    "applied with DOCA would fetch DOCA's key in every baseline run (as for node_groups[].fabric.roce): the "
    "driver container's policy is in tests/network_operator/test_render.py; rolling, since the container "
    "reloads the HCAs' kernel modules node by node (its upgradePolicy drains them)",
    "node_groups[].hardware.discover": "says where the four figures come from (the facts file beside the spec, "
    "gpuforge.spec.discovered), not a figure: a group's discovered figures are its sockets, cores_per_socket, "
    "threads_per_core and real_memory_mb, each with its own mutation, and the applied record keeps them "
    "(tests/spec/test_hardware.py)",
    "slurm.build": "present exactly when slurm.source (rebuild) is build (spec rule slurm_build_rules): it "
    "cannot come or go on its own; its fields each have a reason below",
    "slurm.build.tarball": "where the control host fetches the tarball: the build's key is its sha256, not its "
    "URL (tests/slurm/test_slurm_build.py), so the same file from elsewhere takes the cache and no node file "
    "changes; a simulated run has no build to publish",
    "slurm.build.hosts": "where the build runs: the build's key leaves the host out "
    "(test_the_build_commands_quote_every_value), so no node file changes",
    "slurm.build.sha256": "rebuild: another build of the same package version, which apt does not install over "
    "the nodes' packages; a simulated run has no build to publish (the build and its repository on a node: "
    "tests/slurm/test_slurm_build.py, and for real tests/slurm/test_slurm_build_lab.py)",
    "slurm.build.nvml": "rebuild, for the reason slurm.build.sha256 is",
    "site.ansible": "the site's own Ansible code, which gpuforge runs but does not plan: what a change of it "
    "does is the site role's to say (its fields likewise)",
}
EXEMPT.update({p: EXEMPT["site.ansible"] for p in DECLARED if p.startswith("site.ansible[].")})
CONTROL_HOST_ONLY = (
    "read only by 'gpuforge accept' and 'gpuforge replace' on the control host: no node file is rendered from "
    "it and no deploy reads it (test_acceptance_changes_no_node_file)"
)
EXEMPT.update({p: CONTROL_HOST_ONLY for p in DECLARED if p.split(".")[0] == "acceptance"})
BMC_ONLY = (
    "read only by 'gpuforge power' on the control host (its BMC requests): no node file is rendered from it and "
    "no deploy reads it; the section's mutation (node_groups[].bmc, live) covers each field"
)
EXEMPT.update({p: BMC_ONLY for p in DECLARED if p.startswith("node_groups[].bmc.")})
BOOT_SERVER_ONLY = (
    "read only by 'gpuforge provision' on the control host (the boot server's dnsmasq configuration and iPXE "
    "scripts): no node file is rendered from it and no deploy reads it (test_provisioning_changes_no_node_file)"
)
EXEMPT.update(
    {p: BOOT_SERVER_ONLY for p in DECLARED if p.split(".")[0] == "provisioning" or p.startswith("node_groups[].boot")}
)

ALWAYS_PRESENT = (
    "a model that is always there (required, or made from its defaults): a change to it is a change to one "
    "of its fields, each with its own policy and its own mutation"
)


def exemption(path: str) -> str | None:
    """Why ``path`` has no mutation (None: it needs one)."""
    if path in EXEMPT:
        return EXEMPT[path]
    return ALWAYS_PRESENT if DECLARED[path].shape == "model" else None


# --------------------------------------------------------------------------- what a run does to a node

#: Step kinds that change nothing on a node and ask nothing of the rollout: they tell a person something.
REPORT_KINDS = frozenset({"note", "warning", "unavailable"})
#: ``systemctl <verb> <unit>`` and ``scontrol reconfigure`` anywhere in a step's command.
SYSTEMCTL = re.compile(r"\bsystemctl (restart|try-restart|reload-or-restart|reload|stop) ([\w@.:-]+)")
RECONFIGURE = re.compile(r"\bscontrol reconfigure\b")
#: ``exportfs -ra``: the NFS server re-reads its export tables (exports(5): "To apply changes to
#: this file, run exportfs -ra"), the storage layer's reload of nfs-server.
EXPORTFS = re.compile(r"\bexportfs -ra\b")

#: What each daemon gpuforge restarts or reloads reads (path prefixes; ``built:<layer>`` and
#: ``package:<layer>`` for a plugin that layer built, a package it installed or moved), from the
#: daemons' documentation. Slurm's files are the cluster's: configless slurmd reads them from
#: slurmctld (slurm.conf(5), configless_slurm.html), so a change of one on any node counts.
DAEMON_READS: dict[str, tuple[str, ...]] = {
    "slurmd": (
        "/etc/slurm/slurm.conf",
        "/etc/slurm/gres.conf",
        "/etc/slurm/cgroup.conf",
        "/etc/slurm/plugstack.conf",
        "/etc/slurm/topology.conf",
        "/etc/default/slurmd",
        "/etc/systemd/system/slurmd.service.d/",
        "built:pyxis",
        "package:slurm-config",
    ),
    "slurmctld": ("/etc/slurm/slurm.conf", "/etc/slurm/topology.conf", "package:slurm-config"),
    "slurmdbd": ("/etc/slurm/slurmdbd.conf", "package:slurm-accounting"),
    "munge": ("/etc/munge/",),
    "chrony": ("/etc/chrony/", "package:base"),
    "prometheus": ("/etc/prometheus/prometheus.yml", "/etc/prometheus/gpuforge-rules.yml", "/etc/default/prometheus"),
    "prometheus-alertmanager": ("/etc/prometheus/alertmanager.yml", "/etc/default/prometheus-alertmanager"),
    "prometheus-node-exporter": ("/etc/default/prometheus-node-exporter",),
    "gpuforge-slurm-metrics.timer": ("/etc/systemd/system/gpuforge-slurm-metrics.",),
    "gpuforge-health-metrics.timer": ("/etc/systemd/system/gpuforge-health-metrics.",),
    "gpuforge-k8s-certs.timer": ("/etc/systemd/system/gpuforge-k8s-certs.timer",),
    "gpuforge-etcd-snapshot.timer": ("/etc/systemd/system/gpuforge-etcd-snapshot.timer",),
    "dcgm-exporter": ("/etc/dcgm-exporter/", "/etc/systemd/system/dcgm-exporter.service", "package:nvidia-dcgm"),
    "nvidia-dcgm": ("package:nvidia-dcgm",),
    "nvidia-persistenced": ("/etc/systemd/system/nvidia-persistenced.service.d/", "package:nvidia-driver"),
    "containerd": ("/etc/containerd/", "package:container-engine"),
    "docker": ("/etc/docker/", "package:container-engine"),
    "nvidia-mig-manager": ("/etc/nvidia-mig-manager/", "/etc/systemd/system/nvidia-mig-manager.service.d/"),
    "nfs-server": ("/etc/exports.d/", "package:storage-server"),
}
SHARED_INPUTS = ("/etc/slurm/",)
#: Daemons that ``scontrol reconfigure`` makes read their files again, wherever it runs.
RECONFIGURED = frozenset({"slurmctld", "slurmd"})

#: Daemons that run the jobs, or that running jobs need: whether a restart leaves running jobs
#: alone, and where that is documented. Every other daemon gpuforge restarts serves the node, not
#: the jobs (time sync, metrics, munge's credentials for the next job).
JOB_DAEMONS: dict[str, tuple[bool, str]] = {
    "slurmd": (True, "Slurm Upgrade Guide, slurmd (https://slurm.schedmd.com/upgrades.html#slurmd): 'Upgrades "
               "will not interrupt running jobs as long as SlurmdTimeout is not reached'; the jobs' steps run in "
               "slurmstepd processes, which cgroup/v2 keeps in a systemd scope of their own so that slurmd can "
               "restart apart from them (https://slurm.schedmd.com/cgroup_v2.html#real_sysd_prob)"),
    "slurmctld": (True, "Slurm Upgrade Guide, slurmctld (https://slurm.schedmd.com/upgrades.html#slurmctld): "
                  "while it is down 'job submissions are not accepted, queued jobs are not scheduled, and "
                  "information about completing jobs is held', all resuming once it is back; slurmctld(8): "
                  "without -c 'previously running jobs will be preserved'"),
    "containerd": (True, "containerd's shim is each container's parent process: 'Existing containers will "
                   "continue to run, which is handled by the containerd shim' while containerd restarts (moby "
                   "maintainer, https://github.com/moby/moby/discussions/46449)"),
    "docker": (False, "Docker, Live restore (https://docs.docker.com/engine/daemon/live-restore/): 'By default, "
               "when the Docker daemon terminates, it shuts down running containers' (gpuforge's daemon.json "
               "does not set live-restore)"),
    "nvidia-fabricmanager": (False, "NVIDIA Fabric Manager User Guide, 'CUDA Jobs Behavior When the Fabric "
                             "Manager Service is Stopped or Terminated': with ABORT_CUDA_JOBS_ON_FM_EXIT=1, the "
                             "default of the packaged fabricmanager.cfg, running CUDA jobs are aborted when "
                             "Fabric Manager exits"),
}  # fmt: skip


@dataclass
class NodeEffect:
    """What a run does to one node beyond what the unchanged spec's run does."""

    host: str
    steps: list[PlannedStep] = field(default_factory=list)

    @property
    def acts(self) -> bool:
        return any(s.kind not in REPORT_KINDS for s in self.steps)

    def daemon_actions(self) -> list[tuple[str, str]]:
        """(verb, unit) of every restart, reload, stop and reconfigure the steps run."""
        out = [
            (m.group(1), m.group(2).removesuffix(".service"))
            for s in self.steps
            for m in SYSTEMCTL.finditer(s.command or "")
        ]
        out += [("reconfigure", "slurmctld") for s in self.steps if RECONFIGURE.search(s.command or "")]
        out += [("reload", "nfs-server") for s in self.steps if EXPORTFS.search(s.command or "")]
        return out

    def inputs(self) -> set[str]:
        """The files the steps write, and ``built:``/``package:`` marks of their layers."""
        out = {s.path for s in self.steps if s.path}
        out |= {f"built:{s.layer}" for s in self.steps if s.kind == "build"}
        out |= {f"package:{s.layer}" for s in self.steps if s.kind in ("install", "upgrade")}
        return out


def node_effects(changes: Counter[PlannedStep]) -> dict[str, NodeEffect]:
    effects: dict[str, NodeEffect] = {}
    for step in changes.elements():
        effects.setdefault(step.host, NodeEffect(step.host)).steps.append(step)
    return effects


def _reads(unit: str, inputs: set[str]) -> bool:
    return any(i.startswith(prefix) for i in inputs for prefix in DAEMON_READS.get(unit, ()))


def missing_actions(effect: NodeEffect, running: set[str], shared: set[str], reconfigured: bool) -> list[str]:
    """Daemons running on the node that read a file the run changes, yet are neither restarted nor
    reloaded (nor, for Slurm's, reconfigured): the change would not reach them."""
    acted = {unit for _, unit in effect.daemon_actions()}
    if reconfigured:
        acted |= RECONFIGURED
    paths = {i for i in effect.inputs() | shared if i.startswith("/")}
    out = []
    for unit in sorted(running - acted):
        read = sorted(p for p in paths if any(p.startswith(f) for f in DAEMON_READS.get(unit, ()) if f[0] == "/"))
        if read:
            out.append(f"{unit} reads {read}, which change, and is not restarted, reloaded or reconfigured")
    return out


def live_problems(effect: NodeEffect, shared: set[str]) -> list[str]:
    """Why ``effect`` is not live-safe on a node running jobs (empty: it is). ``shared``: the
    cluster-wide inputs (Slurm's files) that changed on any node."""
    problems = [f"reboot: {s.summary}" for s in effect.steps if s.kind == "reboot-required"]
    problems += [f"waits for a drain: {s.summary}" for s in effect.steps if s.kind == "rolling"]
    inputs = effect.inputs() | shared
    for verb, unit in effect.daemon_actions():
        if unit not in DAEMON_READS:
            problems.append(f"{verb} {unit}: a daemon this test does not know (add what it reads to DAEMON_READS)")
        elif not _reads(unit, inputs):
            problems.append(f"{verb} {unit} although nothing it reads changed ({sorted(inputs)})")
        elif verb != "reload" and unit in JOB_DAEMONS and not JOB_DAEMONS[unit][0]:
            problems.append(f"{verb} {unit}, which running jobs need: {JOB_DAEMONS[unit][1]}")
    return problems


# --------------------------------------------------------------------------- the simulated runs


@dataclass
class ChangedRun:
    """One mutation: the two specs, what changed between them, the rollout and the run's effects."""

    path: str
    old: Spec
    new: Spec
    fields: list[FieldChange]
    rollout: RolloutPlan
    effects: dict[str, NodeEffect]
    running: dict[str, set[str]]
    """The daemons running on each node of the applied spec."""

    def shared_inputs(self) -> set[str]:
        return {i for e in self.effects.values() for i in e.inputs() if i.startswith(SHARED_INPUTS)}

    def describe(self) -> str:
        lines = [f"{self.path}: drained {self.rollout.rolling_nodes}, refused {[c.path for c in self.rollout.refused]}"]
        for host, effect in sorted(self.effects.items()):
            lines += [f"  {host} [{s.layer}] {s.kind}: {s.summary[:160]}" for s in effect.steps]
        return "\n".join(lines)


def write_example(where: Path, data: Data) -> Path:
    """The example as the applied spec in ``where``, with the files it names beside it."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "spare").write_text("a second readable file (a mutation points ssh settings at it)\n")
    (where / "checks").mkdir(exist_ok=True)
    (where / "checks" / "test_more.py").write_text("def test_nothing() -> None:\n    pass\n")
    return write_simulated_spec(data, where, "applied.yaml")


class Examples:
    """The example specs, each applied once to its own simulated nodes (made when first asked for)."""

    def __init__(self, mp: pytest.MonkeyPatch, root: Path) -> None:
        self.mp, self.root = mp, root
        self.applied: dict[str, tuple[Data, ConvergedCluster]] = {}
        self.runs: dict[str, ChangedRun] = {}

    def example(self, name: str) -> tuple[Data, ConvergedCluster]:
        if name not in self.applied:
            data = EXAMPLES[name]()
            path = write_example(self.root / name, data)
            self.applied[name] = (data, converge(spec_load.load_spec(path), path, self.mp, self.root / name))
        return self.applied[name]

    def run(self, path: str, mutation: Mutation) -> ChangedRun:
        """The example changed by ``mutation``: its fields, its rollout and, unless it is refused,
        what a run of it does to the converged nodes (planned once per field)."""
        key = f"{path}@{mutation.example}"
        if key not in self.runs:
            self.runs[key] = self._run(path, mutation)
        return self.runs[key]

    def _run(self, path: str, mutation: Mutation) -> ChangedRun:
        data, cluster = self.example(mutation.example)
        changed = copy.deepcopy(data)
        mutation.change(changed)
        new_path = self.root / mutation.example / f"{re.sub(r'[^a-z0-9]+', '-', path)}.yaml"
        new_path.write_text(yaml_text.dump(changed, sort_keys=False))
        new = spec_load.load_spec(new_path)
        rollout = plan_rollout(cluster.spec, new)
        effects = {} if rollout.refused else node_effects(cluster.changes(new_path))
        running = {
            host: {unit for unit, state in node.units.items() if state.get("ActiveState") == "active"}
            for host, node in cluster.nodes.items()
        }
        return ChangedRun(path, cluster.spec, new, diff_specs(cluster.spec, new), rollout, effects, running)


def parsing_each_text_once(parse: Callable[..., Spec]) -> Callable[..., Spec]:
    """``parse_spec`` that checks a spec text once: a plan loads its file several times (the run,
    each node's deploy context), and the checks of hostile input read the YAML four times over."""
    parsed: dict[tuple[Any, ...], Spec] = {}

    def parse_spec(text: str, filename: str | None = None, *args: Any, **kwargs: Any) -> Spec:
        key = (text, str(Path(filename).resolve()) if filename else None, args, tuple(sorted(kwargs.items())))
        if key not in parsed:
            parsed[key] = parse(text, filename, *args, **kwargs)
        return parsed[key]

    return parse_spec


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Examples]:
    root = tmp_path_factory.mktemp("policy")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUFORGE_STATE_DIR", str(root / "state"))
        mp.setattr(spec_load, "parse_spec", parsing_each_text_once(spec_load.parse_spec))
        yield Examples(mp, root)


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_run_of_the_applied_spec_changes_nothing_on_its_converged_nodes(name: str, examples: Examples) -> None:
    """The simulated nodes are converged: a run of the spec they were applied with plans nothing
    but reports (and slurmdbd's sacctmgr commands: its database is not simulated), so no step a
    changed spec's run plans is hidden by the baseline subtracted from it."""
    _, cluster = examples.example(name)
    assert cluster.nodes and all(node.files for node in cluster.nodes.values())
    kinds = Counter(step.kind for step in cluster.baseline.elements())
    assert set(kinds) <= REPORT_KINDS | {"sacctmgr"}, kinds


def test_every_declared_field_has_a_mutation_or_a_reasoned_exemption() -> None:
    assert len(DECLARED) > 150, "the walk of the model found too few fields"
    missing = [p for p in DECLARED if p not in MUTATIONS and exemption(p) is None]
    assert not missing, f"fields with a policy and no mutation (add one to MUTATIONS, or a reason to EXEMPT): {missing}"
    assert not [p for p in MUTATIONS if p not in DECLARED], "mutations of fields the model does not declare"
    assert not [p for p in MUTATIONS if p in EXEMPT], "a field is both mutated and exempt"
    for path, mutation in MUTATIONS.items():
        assert mutation.example in EXAMPLES, path
        assert all(other in DECLARED for other in mutation.also), path


@pytest.mark.parametrize("path", sorted(MUTATIONS))
def test_a_change_does_only_what_its_declared_policy_allows(path: str, examples: Examples) -> None:
    run = examples.run(path, MUTATIONS[path])
    touched = {field_path(c.loc) for c in run.fields}
    where = reported_as(path)
    assert where in touched, f"the mutation does not change {path}: {sorted(touched)}"
    assert touched <= {where, *MUTATIONS[path].also}, f"the mutation changes more than {path}: {sorted(touched)}"
    policy = DECLARED[path].policy
    mine = [c for c in run.fields if field_path(c.loc) == where]
    assert {c.policy for c in mine} == {policy}, f"the plan applies {path} as {[c.policy for c in mine]}"
    if policy is UpdatePolicy.REBUILD:
        assert set(c.loc for c in mine) <= set(c.loc for c in run.rollout.refused), run.describe()
        return
    assert not run.rollout.refused, run.describe()
    drained = set(run.rollout.rolling_nodes) if policy is UpdatePolicy.ROLLING else set()
    if policy is UpdatePolicy.LIVE:
        assert not run.rollout.rolling_nodes, run.describe()
    existing = {n.name for n in resolve_nodes(run.old)}
    shared = run.shared_inputs()
    problems = {
        host: live_problems(effect, shared)
        for host, effect in run.effects.items()
        if host in existing and host not in drained and effect.acts
    }
    problems = {h: p for h, p in problems.items() if p}
    assert not problems, f"{policy.value} change, yet on nodes that are not drained:\n{problems}\n{run.describe()}"


NOT_REFUSED = sorted(p for p in MUTATIONS if DECLARED[p].policy is not UpdatePolicy.REBUILD)


@pytest.mark.parametrize("path", NOT_REFUSED)
def test_a_change_reaches_every_daemon_that_reads_it(path: str, examples: Examples) -> None:
    """Live or rolling, a changed file must reach the daemons that read it: each is restarted or
    reloaded (Slurm's: or reconfigured) where it runs, else the change waits for a reboot."""
    run = examples.run(path, MUTATIONS[path])
    shared = run.shared_inputs()
    reconfigured = any(a == ("reconfigure", "slurmctld") for e in run.effects.values() for a in e.daemon_actions())
    missing = {
        host: missing_actions(effect, run.running.get(host, set()), shared, reconfigured)
        for host, effect in run.effects.items()
    }
    quiet = {host for host in run.running if host not in run.effects and (run.running[host] & RECONFIGURED)}
    missing.update({h: missing_actions(NodeEffect(h), run.running[h], shared, reconfigured) for h in quiet})
    missing = {h: m for h, m in missing.items() if m}
    assert not missing, f"changes that reach no daemon:\n{missing}\n{run.describe()}"


@pytest.mark.parametrize("example", ["lab", "hopper"])
def test_a_cgroup_conf_change_alone_restarts_slurmd_on_every_compute_node(example: str, examples: Examples) -> None:
    """gpuforge brings a cgroup.conf change to slurmd by restarting it on each compute node (the
    restart running jobs survive, see JOB_DAEMONS): with the file pushed to every node (lab) and
    with configless slurmd (hopper), which fetches it from slurmctld where alone it changes."""
    cores = MUTATIONS["slurm.cgroups.constrain_cores"]
    run = examples.run("slurm.cgroups.constrain_cores", Mutation(example, cores.change))
    written = {s.path for e in run.effects.values() for s in e.steps if s.path}
    # health.json lists every managed file's digest (the health check's drift check): it follows
    # cgroup.conf on the nodes that have it, and only there.
    assert written - {HEALTH_CONFIG} == {"/etc/slurm/cgroup.conf"}, run.describe()
    for host, effect in run.effects.items():
        paths = {s.path for s in effect.steps if s.path}
        assert HEALTH_CONFIG not in paths or "/etc/slurm/cgroup.conf" in paths, (host, run.describe())
    compute = [n.name for n in resolve_nodes(run.old) if n.has(Role.COMPUTE)]
    assert compute, f"{example} has no compute node"
    for name in compute:
        actions = run.effects[name].daemon_actions() if name in run.effects else []
        assert ("restart", "slurmd") in actions, f"{name}: slurmd not restarted\n{run.describe()}"
    restarted = {unit for e in run.effects.values() for _, unit in e.daemon_actions()}
    assert restarted == {"slurmd"}, run.describe()


@pytest.mark.parametrize("example", ["hopper", "hopper-docker"])
def test_a_live_change_of_the_container_engine_config_leaves_containers_running(
    example: str, examples: Examples
) -> None:
    """container_runtime.nvidia_default is live with either engine: containerd restarts (its shims
    keep the containers), dockerd, which stops its containers when it exits, only reloads."""
    nvidia_default = MUTATIONS["container_runtime.nvidia_default"]
    run = examples.run("container_runtime.nvidia_default", Mutation(example, nvidia_default.change))
    engine = run.old.container_runtime.engine.value
    acting = {h: e for h, e in run.effects.items() if any(unit == engine for _, unit in e.daemon_actions())}
    assert acting, f"no {engine} took the change\n{run.describe()}"
    problems = {h: live_problems(e, run.shared_inputs()) for h, e in acting.items()}
    assert not any(problems.values()), f"{problems}\n{run.describe()}"


def test_acceptance_changes_no_node_file() -> None:
    """The acceptance section (exempt above) changes no file on any node, and no renderer or deploy reads it."""
    from gpuforge.render import render_cluster

    path = Path(__file__).resolve().parents[1] / "spec" / "fixtures" / "every_field_slurm.yaml"
    data = yaml.safe_load(path.read_text())
    assert data.get("acceptance"), "the every-field fixture sets the acceptance section"
    without = {k: v for k, v in data.items() if k != "acceptance"}
    with_it, without_it = (render_cluster(spec_load.parse_spec(yaml_text.dump(d))) for d in (data, without))
    assert {n: [(f.path, f.data) for f in fs] for n, fs in with_it.items()} == {
        n: [(f.path, f.data) for f in fs] for n, fs in without_it.items()
    }
    root = Path(__file__).resolve().parents[2] / "gpuforge"
    readers = [p for d in ("render", "deploy") for p in (root / d).rglob("*.py") if "acceptance" in p.read_text()]
    assert not readers, readers


def test_provisioning_changes_no_node_file() -> None:
    """The network boot's sections (exempt above) change no file on any node; of the renderers and deploys
    only the boot server's renderer (render/pxe.py) reads them."""
    from gpuforge.render import render_cluster

    path = Path(__file__).resolve().parents[1] / "spec" / "fixtures" / "every_field_slurm.yaml"
    data = yaml.safe_load(path.read_text())
    assert data.get("provisioning") and any("boot" in g for g in data["node_groups"]), "the fixture sets both"
    without = {k: v for k, v in data.items() if k != "provisioning"}
    without["node_groups"] = [{k: v for k, v in g.items() if k != "boot"} for g in data["node_groups"]]
    with_it, without_it = (render_cluster(spec_load.parse_spec(yaml_text.dump(d))) for d in (data, without))
    assert {n: [(f.path, f.data) for f in fs] for n, fs in with_it.items()} == {
        n: [(f.path, f.data) for f in fs] for n, fs in without_it.items()
    }
    root = Path(__file__).resolve().parents[2] / "gpuforge"
    readers = [
        p.relative_to(root).as_posix()
        for d in ("render", "deploy")
        for p in (root / d).rglob("*.py")
        if re.search(r"\.provisioning\b|\.boot\b", p.read_text())
    ]
    assert readers == ["render/pxe.py"], readers
