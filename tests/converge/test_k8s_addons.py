"""Cluster add-ons on the first control plane (pod network, helm, GPU Operator, queue controller, queues,
node labels): facts (stamps) in, exact steps out; applied again only when their inputs change."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.layers.k8s_addons import STAMP_DIR, addons, addons_layer
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import resolve_nodes
from gpuforge.spec.load import parse_spec
from tests.conftest import REPO

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
ADMIN = "KUBECONFIG=/etc/kubernetes/admin.conf"


def load(mutate: Any = None, base_dir: Path | None = None) -> Any:
    data = yaml.safe_load(K8S.read_text())
    if mutate:
        mutate(data)
    return parse_spec(yaml.safe_dump(data), "k8s.yaml", base_dir=base_dir or K8S.parent)


def plan(spec: Any, stamps: dict[str, str] | None = None) -> list[Any]:
    first = next(n for n in resolve_nodes(spec) if n.name == "kcp1")
    layer = addons_layer(spec, first)
    assert layer.after is not None
    return list(layer.after(LayerFacts(contents=dict(stamps or {})), set()))


def applied(spec: Any) -> dict[str, str]:
    """The stamps a run that applied every add-on of ``spec`` leaves."""
    return {a.stamp: a.digest + "\n" for a in addons(spec)}


def test_a_fresh_cluster_gets_every_add_on_in_order() -> None:
    steps = plan(load())
    assert [s.summary for s in steps] == [
        "apply pod network: flannel v0.26.1 (pod CIDR 10.244.0.0/16)",
        "apply helm 3.16.3 in /usr/local/bin/helm",
        "apply GPU Operator v26.7.0 (helm upgrade --install, values /etc/gpuforge/k8s/gpu-operator-values.yaml)",
        "apply kueue v0.19.2",
        "apply the tenants' queues (2, /etc/gpuforge/k8s/kueue.yaml)",
        "apply labels on 2 node(s) (nvidia.com/mig.config)",
    ]
    assert all(s.kind is StepKind.INSTALL for s in steps)
    operator = steps[2].command
    values_sha = hashlib.sha256(k8s.gpu_operator_values_yaml(load()).encode()).hexdigest()[:16]
    assert operator == (
        f"{ADMIN} /usr/local/bin/helm upgrade --install gpu-operator gpu-operator --namespace gpu-operator "
        "--create-namespace --version v26.7.0 -f /etc/gpuforge/k8s/gpu-operator-values.yaml "
        "--repo https://helm.ngc.nvidia.com/nvidia --wait --timeout 15m && "
        f"install -d -m 0755 {STAMP_DIR} && echo 'v26.7.0 values:{values_sha}' > {STAMP_DIR}/gpu-operator.applied"
    )
    assert steps[3].command is not None and steps[3].command.endswith(
        f"{ADMIN} kubectl wait deploy/kueue-controller-manager -n kueue-system --for=condition=available "
        f"--timeout=5m && install -d -m 0755 {STAMP_DIR} && "
        f"echo 'kueue v0.19.2 -' > {STAMP_DIR}/queue-controller.applied"
    )
    assert "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml" in steps[3].command
    assert f"{ADMIN} kubectl label node kinf01 --overwrite nvidia.com/mig.config=all-1g" in (steps[5].command or "")


def test_nothing_is_applied_again_without_a_change() -> None:
    spec = load()
    assert plan(spec, applied(spec)) == []


def test_changed_values_run_helm_again_and_nothing_else() -> None:
    before = load()
    after = load(lambda d: d["kubernetes"]["gpu_operator"].update(time_slicing_replicas=4))
    (step,) = plan(after, applied(before))
    assert step.summary.startswith("apply GPU Operator v26.7.0")


def test_a_new_chart_version_runs_helm_again() -> None:
    before = load()
    after = load(lambda d: d["versions"].update(gpu_operator="v26.7.1"))
    (step,) = plan(after, applied(before))
    assert "--version v26.7.1" in (step.command or "")


def test_a_new_queue_controller_release_applies_the_queues_again() -> None:
    """A release's manifests carry their own scheduler ConfigMap (Volcano): ours must follow."""
    before = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1"))
    after = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.2"))
    assert [s.summary.split(" (")[0] for s in plan(after, applied(before))] == [
        "apply volcano v1.15.2",
        "apply the tenants' queues",
    ]


def test_an_interrupted_add_on_is_applied_again() -> None:
    spec = load()
    stamps = applied(spec)
    del stamps[f"{STAMP_DIR}/queues.applied"]  # its command never finished: no stamp was written
    (step,) = plan(spec, stamps)
    assert step.summary.startswith("apply the tenants' queues")


def test_flannel_is_given_the_spec_pod_cidr(tmp_path: Path) -> None:
    spec = load(lambda d: d["kubernetes"].update(pod_cidr="10.32.0.0/12"))
    cni = plan(spec)[0].command or ""
    sed = next(part for part in cni.split(" && ") if part.startswith("sed "))
    # net-conf.json as flannel's kube-flannel.yml ships it (README: match the Network to the pod CIDR)
    manifest = tmp_path / "kube-flannel.yml"
    manifest.write_text('  net-conf.json: |\n    {\n      "Network": "10.244.0.0/16",\n      "Backend": {}\n    }\n')
    subprocess.run(["sh", "-c", sed.replace("/var/lib/gpuforge/downloads/kube-flannel-v0.26.1.yml", str(manifest))],
                   check=True)  # fmt: skip
    assert '"Network": "10.32.0.0/12"' in manifest.read_text()
    assert "sed " not in (plan(load())[0].command or "")  # the default needs no edit


def test_calico_takes_its_pinned_manifest() -> None:
    spec = load(lambda d: d["kubernetes"].update(cni={"plugin": "calico", "version": "v3.29.2"}))
    cni = plan(spec)[0]
    assert "https://raw.githubusercontent.com/projectcalico/calico/v3.29.2/manifests/calico.yaml" in (cni.command or "")
    assert "sed " not in (cni.command or "")  # calico reads the pod CIDR from kubeadm's configuration


def test_volcano_waits_for_its_admission_webhook() -> None:
    spec = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1"))
    controller = next(s for s in plan(spec) if s.summary == "apply volcano v1.15.1")
    assert "https://raw.githubusercontent.com/volcano-sh/volcano/v1.15.1/installer/volcano-development.yaml" in (
        controller.command or ""
    )
    assert "kubectl wait deploy/volcano-admission -n volcano-system" in (controller.command or "")


def test_without_a_source_an_add_on_is_reported_and_later_ones_wait() -> None:
    def mirror(d: dict[str, Any]) -> None:
        d["sources"] = {"mode": "mirror", "apt_proxy": "http://192.0.2.1:3142"}

    steps = plan(load(mirror))
    assert [s.kind for s in steps] == [StepKind.UNAVAILABLE]
    assert "sources.mirrors.artifacts" in steps[0].summary


def test_offline_pushes_the_bundles_chart_and_manifests(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "artifacts").mkdir(parents=True)
    names = ["kube-flannel-v0.26.1.yml", "helm-v3.16.3-linux-amd64.tar.gz", "gpu-operator-v26.7.0.tgz",
             "kueue-v0.19.2-manifests.yaml"]  # fmt: skip
    files = []
    for name in names:
        (bundle / "artifacts" / name).write_bytes(name.encode())
        files.append({"path": f"artifacts/{name}", "sha256": hashlib.sha256(name.encode()).hexdigest()})
    (bundle / "manifest.json").write_text(json.dumps({"files": files}))
    spec = load(lambda d: d.update(sources={"mode": "offline", "bundle_dir": str(bundle)}))
    steps = plan(spec)
    uploads = [s.upload.path for s in steps if s.upload is not None]
    assert uploads == [f"/var/lib/gpuforge/bundle/{n}" for n in names]
    operator = next(s for s in steps if s.summary.startswith("apply GPU Operator"))
    assert "upgrade --install gpu-operator /var/lib/gpuforge/bundle/gpu-operator-v26.7.0.tgz" in (
        operator.command or ""
    )
    assert "--repo" not in (operator.command or "")


@pytest.mark.parametrize("name", ["kcp2", "kgpu01"])
def test_only_the_first_control_plane_applies_add_ons(name: str) -> None:
    spec = load()
    assert addons_layer(spec, next(n for n in resolve_nodes(spec) if n.name == name)).is_empty


def test_no_gpu_workers_no_operator() -> None:
    def cpu_only(d: dict[str, Any]) -> None:
        d["node_groups"] = [g for g in d["node_groups"] if g["name"] in ("cp", "mon")]
        d["kubernetes"]["batch_queue"] = {"kind": "none"}

    assert [a.name for a in addons(load(cpu_only))] == ["cni"]
