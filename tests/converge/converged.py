"""A simulated cluster that an apply has already converged: what a change does to running nodes.

``simulated.py`` answers every read as a fresh node would. Here each node answers as a node of
a spec that was applied: its packages, files, directories, accounts and services are those the
deploys' layers want for that spec (recorded from one dry run of it), the spec's GPUs are on its
PCI bus with the pinned driver loaded, and the markers a run leaves (CDI spec, pyxis build,
add-on stamps, ...) say what that spec's run wrote. A dry run of ANOTHER spec against these
nodes then plans what applying the change does to the running cluster. A dry run of the applied
spec itself (the baseline) plans no change, only reports (and slurmdbd's sacctmgr commands: the
accounting database is not simulated); ``ConvergedCluster.changes`` is what a run plans beyond it.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyinfra import context

from gpuforge.deploy.converge import Layer, LayerFacts, Step, package_name
from gpuforge.deploy.fact_prefetch import FactRequest
from gpuforge.deploy.layers import kubernetes as k8s_layer
from gpuforge.deploy.layers.k8s_addons import addons
from gpuforge.deploy.layers.nvidia.common import CDI_MARKER, DCGM_EXPORTER_MARKER, PYXIS_MARKER
from gpuforge.deploy.layers.nvidia.enroot import EXTRA_HOOKS, EXTRA_HOOKS_DIR, HOOKS_DIR
from gpuforge.deploy.operations import layer as layer_operation
from gpuforge.deploy.runstate import RunState
from gpuforge.orchestrate.apply import run_deploys
from gpuforge.probes.pci import NVSWITCH_DEVICE_IDS
from gpuforge.render import k8s_packages, kube_vip
from gpuforge.render import nvidia_sources as src
from gpuforge.render.kubernetes import K8S_SYSCTLS
from gpuforge.render.nvidia import CDI_SPEC, TOOLKIT_CONFIG, UNPRIVILEGED_GPU_SETTINGS
from gpuforge.spec import Spec, k8s_day2, k8s_upstream, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.nodes import Node
from tests.converge.simulated import SimulatedCluster, SimulatedConnector, simulated

#: The version a converged node has of a package no spec version names (kernel headers, gcc).
UNPINNED = "0-converged"
KERNEL_RELEASE = "6.8.0-49-generic"


def component_version(spec: Spec, package: str) -> str:
    """The version a converged node has of ``package`` (named without a pin): the spec's version
    of its component, in the packages' own form (``<version>-1``)."""
    v = spec.versions
    components = (
        (("kubelet", "kubeadm", "kubectl"), v.kubernetes),
        (("datacenter-gpu-manager-exporter",), v.dcgm_exporter.split("-", 1)[-1]),  # the exporter half
        (("datacenter-gpu-manager",), v.dcgm),
        (("enroot",), v.enroot),
        (("nvidia-mig-manager",), v.mig_manager),
        (("nvidia-", "libnvidia-"), v.driver.version if v.driver else None),
    )
    for prefixes, version in components:
        if version is not None and package.startswith(prefixes):
            return f"{version}-1"
    return UNPINNED


def run_markers(spec: Spec, packages: dict[str, str]) -> dict[str, str]:
    """What the runs that converged a node left that no layer uploads: stamps and markers written
    by commands, keys fetched on the node, the kernel state a Kubernetes node was given. Absent, as
    after a run that finished: the kubeadm and reboot-required markers (nothing is owed)."""
    v = spec.versions
    out = {
        src.CUDA_KEYRING: "key",
        src.CONTAINER_KEYRING: "key",
        k8s_packages.K8S_KEYRING: "key",
        CDI_SPEC: "cdiVersion: 0.5.0\n",
        CDI_MARKER: f"{v.container_toolkit} {v.driver.version if v.driver else 'operator'}",
        DCGM_EXPORTER_MARKER: v.dcgm_exporter,
        PYXIS_MARKER: f"{v.pyxis} {packages.get('libslurm-dev', UNPINNED)}",
        TOOLKIT_CONFIG: "".join(f"{k} = {str(b).lower()}\n" for k, b in UNPRIVILEGED_GPU_SETTINGS.items()),
        "/etc/initramfs-tools/initramfs.conf": "MODULES=most\n",
        k8s_layer.PROC_FILESYSTEMS: "nodev\toverlay\n",
        k8s_layer.BRIDGE_NF: "1\n",
        k8s_layer.PROC_SWAPS: "Filename\tType\tSize\tUsed\tPriority\n",
        k8s_layer.FSTAB: "",
        k8s_upstream.KUBELET_CONFIG: f"apiVersion: {k8s_upstream.KUBELET_CONFIG_API}\n",
    }
    out.update({k8s_layer.sysctl_path(k): value for k, value in K8S_SYSCTLS})
    out.update({f"{HOOKS_DIR}/{hook}": f"#!/bin/sh (link to {EXTRA_HOOKS_DIR}/{hook})" for hook in EXTRA_HOOKS})
    if kube_vip.interface(spec) is not None:  # written around init and join, by no layer's files
        out[k8s_day2.KUBE_VIP_MANIFEST] = kube_vip.manifest(spec)
    if spec.kubernetes is not None:
        for a in addons(spec):
            out[a.stamp] = a.digest + (" revision:1" if a.release is not None else "")
            if a.release is not None:
                out[a.release.key] = "rc=0\n" + json.dumps([{"revision": 1, "status": "deployed"}])
    return out


@dataclass
class ConvergedNode:
    """What a converged node has, as the layer facts read it."""

    packages: dict[str, str] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)
    units: dict[str, dict[str, Any]] = field(default_factory=dict)
    accounts: dict[str, int] = field(default_factory=dict)

    def take(self, layer: Layer, spec: Spec) -> None:
        """Everything ``layer`` wants on the node, as it is once the layer converged."""
        for pkg in (*layer.packages, *layer.watch_packages):
            name = package_name(pkg)
            self.packages[name] = pkg.split("=", 1)[1] if "=" in pkg else component_version(spec, name)
        for f in layer.all_files:
            attrs = {"mode": f.mode, "owner": f.owner, "group": f.group}
            self.files[f.path] = {"type": "file", "sha256": f.sha256, **attrs}
            if not f.streamed:
                self.contents[f.path] = f.data.decode(errors="replace")
        for d in layer.directories:
            self.files[d.path] = {"type": "directory", "mode": d.mode, "owner": d.owner, "group": d.group}
        for svc in layer.services:
            self.units[svc.unit] = {
                "ActiveState": "active" if svc.running else "inactive",
                "UnitFileState": "enabled" if svc.enabled else "disabled",
            }
        for acct in layer.accounts:
            self.accounts[acct.name] = acct.uid

    def facts(self, request: FactRequest) -> LayerFacts:
        """The answer to one layer's read (``LayerState``), as on a real node: None where absent."""
        return LayerFacts(
            packages={package_name(p): self.packages.get(package_name(p)) for p in request.packages},
            files={p: copy.deepcopy(self.files.get(p)) for p in request.paths},
            units={u: copy.deepcopy(self.units.get(u)) for u in request.units},
            accounts={a: self.accounts.get(a) for a in request.accounts},
            contents={str(p): self.contents.get(str(p)) for p in request.read_paths},
        )


def nvidia_host_lines(spec: Spec, node: Node, command: str) -> list[str]:
    """``NvidiaHost``'s answer on a converged node: its GPUs (and NVSwitches) on the PCI bus, the
    pinned driver loaded, the queried packages at the spec's versions."""
    lines = ["__section=pci"]
    gpu = node.hardware.gpu
    if gpu is not None:
        device = GPU_MODELS[gpu.model].pci_device_ids[0].lower()
        lines += [f"0000:{0x18 + i:02x}:00.0 0x030200 0x{device}" for i in range(gpu.count)]
        if node.hardware.nvswitch:
            lines += [f"0000:{0x07 + i:02x}:00.0 0x068000 0x{sorted(NVSWITCH_DEVICE_IDS)[0]}" for i in range(4)]
    lines.append("__rc=0")
    driver = spec.versions.driver
    lines += ["__section=driver", *([driver.version] if driver and gpu else []), "__section=kernel", KERNEL_RELEASE]
    lines += ["__section=secureboot", "SecureBoot disabled", "__section=packages"]
    query = command.partition("echo __query=")[2].split(";", 1)[0].split()
    if query:
        lines += [f"__query={' '.join(query)}", "__tool=dpkg"]
        lines += [f"{p}\t{component_version(spec, p)}\tii" for p in query]
    return lines


@dataclass(frozen=True)
class PlannedStep:
    """One step of a dry run on one host, comparable across runs."""

    host: str
    layer: str
    kind: str
    summary: str
    command: str | None
    path: str | None
    """The file an upload step writes."""

    @classmethod
    def of(cls, host: str, layer: str, step: Step) -> PlannedStep:
        path = step.upload.path if step.upload is not None else None
        return cls(host, layer, str(step.kind), step.summary, step.command, path)


def steps_of(run: RunState) -> Counter[PlannedStep]:
    return Counter(PlannedStep.of(h, op.layer, s) for h, ops in run.planned.items() for op in ops for s in op.steps)


@contextmanager
def recording_layers() -> Iterator[dict[str, list[Layer]]]:
    """While open, every layer a run plans is recorded under its host's name."""
    seen: dict[str, list[Layer]] = {}
    real = layer_operation.plan_layer

    def plan_and_record(layer: Layer, facts: LayerFacts) -> Any:
        seen.setdefault(context.host.name, []).append(layer)
        return real(layer, facts)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layer_operation, "plan_layer", plan_and_record)
        yield seen


def dry_run(spec_path: Path) -> RunState:
    """A plan of ``spec_path`` on the simulated nodes (every node answering)."""
    run = RunState(dry_run=True)
    result = run_deploys(load_cluster(spec_path), run=run)
    assert result.ok, {n: h.error for n, h in result.hosts.items() if h.error}
    return run


@dataclass
class ConvergedCluster:
    """The simulated nodes of ``spec`` after it was applied, and what a no-change run plans there."""

    spec: Spec
    nodes: dict[str, ConvergedNode]
    sim: SimulatedCluster
    baseline: Counter[PlannedStep] = field(default_factory=Counter)

    def plan(self, spec_path: Path) -> Counter[PlannedStep]:
        """The steps a dry run of ``spec_path`` plans on these nodes (a node the applied spec does
        not have answers as a fresh one)."""
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(SimulatedConnector, "cluster", self.sim)
            mp.setattr(layer_operation, "read_facts", self._read_facts)
            return steps_of(dry_run(spec_path))

    def changes(self, spec_path: Path) -> Counter[PlannedStep]:
        """What applying ``spec_path`` does here beyond what a run of the applied spec does."""
        return self.plan(spec_path) - self.baseline

    def _read_facts(self, request: FactRequest) -> LayerFacts:
        node = self.nodes.get(context.host.name)
        return node.facts(request) if node is not None else LayerFacts()

    def _answer_nvidia_host(self, host: str, command: str) -> tuple[bool, list[str]] | None:
        if "echo __section=pci" not in command or host not in self.nodes:
            return None
        node = next(n for n in resolve_nodes(self.spec) if n.name == host)
        return True, nvidia_host_lines(self.spec, node, command)


def converge(spec: Spec, spec_path: Path, mp: pytest.MonkeyPatch, where: Path) -> ConvergedCluster:
    """Simulated nodes converged to ``spec`` (written at ``spec_path``), with its baseline plan."""
    cluster = ConvergedCluster(spec, {n.name: ConvergedNode() for n in resolve_nodes(spec)}, simulated(mp, where))
    cluster.sim.responders.insert(0, cluster._answer_nvidia_host)
    with recording_layers() as layers:
        dry_run(spec_path)
    for host, wanted in layers.items():
        node = cluster.nodes[host]
        for layer in wanted:
            node.take(layer, spec)
        node.contents = {**run_markers(spec, node.packages), **node.contents}
    cluster.baseline = cluster.plan(spec_path)
    return cluster
