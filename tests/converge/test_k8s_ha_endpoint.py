"""The API server's HA endpoint and the cluster network pin: kube-vip's static pod (ARP mode) on every
control plane, or a site's external load balancer; control planes joining one at a time; kubelet's
``--node-ip`` and flannel's ``--iface`` from ``kubernetes.node_interface``.

kube-vip's manifest is checked against the core v1 Pod schema of the pinned minor (``kubernetes-validate``,
strict) and against the environment variables kube-vip v1.2.3 reads (``k8s_day2``); kubeadm's configs
against its API field names; flannel's argument edit runs in ``sh`` on flannel's own argument block.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.k8s_pki import generate_pki
from gpuforge.deploy.layers import kubeadm as kubeadm_layer
from gpuforge.deploy.layers.k8s_addons import cni_addon
from gpuforge.deploy.runstate import RunState
from gpuforge.orchestrate.plan import plan
from gpuforge.render import kube_vip
from gpuforge.render import kubeadm as cfg
from gpuforge.spec import SpecError, k8s_day2, k8s_upstream, load_spec, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.converge.simulated import simulated, write_simulated_spec
from tests.helpers import INVENTORIES
from tests.render.kubeadm_api_fields import unknown_fields

MEMBER = {k8s_upstream.KUBELET_CONFIG: "kind: KubeletConfiguration\n"}


def data(mutate: Any = None) -> dict[str, Any]:
    d = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    if mutate:
        mutate(d["kubernetes"])
    return d


def spec_of(mutate: Any = None) -> Any:
    return parse_spec(yaml_text.dump(data(mutate)), "k8s.yaml")


def node(spec: Any, name: str) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == name)


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    return generate_pki()


# --------------------------------------------------------------------------- kube-vip's manifest


def test_the_kube_vip_pod_is_a_valid_pod_with_only_the_variables_kube_vip_reads() -> None:
    spec = load_spec(INVENTORIES / "k8s-gpu-operator.yaml")
    pod = yaml.safe_load(kube_vip.manifest(spec))
    minor = ".".join(spec.versions.kubernetes.split(".")[:2])
    assert kubernetes_validate.validate(pod, minor, strict=True) == minor
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert set(env) <= k8s_day2.KUBE_VIP_ENV
    assert env["address"] == "198.51.100.9" and env["vip_interface"] == "ens1f0"  # the example's VIP, node_interface
    assert (env["vip_arp"], env["cp_enable"], env["vip_leaderelection"], env["port"]) == (
        "true",
        "true",
        "true",
        "6443",
    )
    assert c["image"] == "ghcr.io/kube-vip/kube-vip:v1.2.3" and c["args"] == ["manager"]
    assert c["securityContext"]["capabilities"] == {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["volumes"] == [{"name": "kubeconfig", "hostPath": {"path": "/etc/kubernetes/admin.conf"}}]


def test_the_check_bites_on_a_misspelt_pod_field() -> None:
    pod = yaml.safe_load(kube_vip.manifest(load_spec(INVENTORIES / "k8s-gpu-operator.yaml")))
    pod["spec"]["hostnetwork"] = pod["spec"].pop("hostNetwork")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, "1.36", strict=True)


def test_the_first_control_plane_runs_kube_vip_with_super_admin_during_init(pki: dict[str, bytes]) -> None:
    spec = spec_of()
    steps = kubeadm_layer.control_plane_layer(spec, node(spec, "kcp1"), pki).after(LayerFacts(), set())  # type: ignore[misc]
    kinds = [(s.kind, s.upload.path if s.upload else None) for s in steps]
    assert kinds == [(StepKind.UPLOAD, k8s_day2.KUBE_VIP_MANIFEST), (StepKind.INSTALL, None),
                     (StepKind.UPLOAD, k8s_day2.KUBE_VIP_MANIFEST)]  # fmt: skip
    during, after = (yaml.safe_load(s.upload.data) for s in (steps[0], steps[2]))  # type: ignore[union-attr]
    assert during["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"
    assert after["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/admin.conf"
    assert "kubeadm init" in (steps[1].command or "") and steps[0].upload.mode == "0600"  # type: ignore[union-attr]


def test_other_control_planes_get_kube_vip_right_after_their_join(pki: dict[str, bytes]) -> None:
    spec = spec_of()
    steps = kubeadm_layer.join_layer(spec, node(spec, "kcp2"), RunState(), pki).after(LayerFacts(), set())  # type: ignore[misc]
    assert "kubeadm join" in (steps[-2].command or "")
    assert steps[-1].upload is not None and steps[-1].upload.path == k8s_day2.KUBE_VIP_MANIFEST
    worker = kubeadm_layer.join_layer(spec, node(spec, "kgpu01"), RunState(), pki).after(LayerFacts(), set())  # type: ignore[misc]
    assert all(s.upload is None or s.upload.path != k8s_day2.KUBE_VIP_MANIFEST for s in worker)


def test_a_control_plane_in_the_cluster_keeps_kube_vip_as_the_spec_says(pki: dict[str, bytes]) -> None:
    spec = spec_of()
    layer = kubeadm_layer.control_plane_layer(spec, node(spec, "kcp2"), pki)
    current: dict[str, str | None] = {**MEMBER, k8s_day2.KUBE_VIP_MANIFEST: kube_vip.manifest(spec)}
    assert layer.after(LayerFacts(contents=current), set()) == []  # type: ignore[misc]
    newer = spec_of(lambda k: k["api_endpoint"].update(version="v1.2.4"))
    (step,) = kubeadm_layer.control_plane_layer(newer, node(newer, "kcp2"), pki).after(  # type: ignore[misc]
        LayerFacts(contents=current), set()
    )
    assert step.upload is not None and "kube-vip:v1.2.4" in step.upload.data.decode()
    assert layer.after(LayerFacts(), set()) == []  # type: ignore[misc]  # not in the cluster yet: its join writes it


def test_an_external_endpoint_runs_no_kube_vip(pki: dict[str, bytes]) -> None:
    spec = spec_of(lambda k: k.update(api_endpoint={"type": "external", "address": "k8s-api.example.org"}))
    assert cfg.api_endpoint(spec) == "k8s-api.example.org:6443"
    steps = kubeadm_layer.control_plane_layer(spec, node(spec, "kcp1"), pki).after(LayerFacts(), set())  # type: ignore[misc]
    assert [s.kind for s in steps] == [StepKind.INSTALL]
    assert kubeadm_layer.control_plane_layer(spec, node(spec, "kcp2"), pki).after is None


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda k: k.pop("node_interface"), "kubernetes.api_endpoint.interface", "set api_endpoint.interface"),
        (lambda k: k["api_endpoint"].update(address="198.51.100.11"), "kubernetes.api_endpoint.address",
         "the address of kcp2"),
        (lambda k: k.update(api_endpoint={"type": "kube-vip", "address": "k8s-api.example.org"}),
         "kubernetes.api_endpoint.address", "kube-vip's VIP is an IPv4 address"),
        (lambda k: k.update(node_interface="eth0; reboot"), "kubernetes.node_interface", "not an interface name"),
    ],
)  # fmt: skip
def test_bad_endpoints_name_their_field(mutate: Any, field: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_of(mutate)
    assert field in e.value.format() and words in e.value.format()


# --------------------------------------------------------------------------- joins one at a time


def test_control_planes_join_one_operation_each_before_the_workers() -> None:
    titles = [title for title, _ in kubeadm_layer.operations(spec_of())]
    assert titles[2:] == [
        "kubernetes: kubeadm join of control plane kcp2",
        "kubernetes: kubeadm join of control plane kcp3",
        "kubernetes: kubeadm join of the workers",
    ]


def test_a_fresh_cluster_plans_each_control_plane_join_in_its_own_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through pyinfra: kcp2's join and kcp3's are separate operations (run one after the other across
    hosts), each followed by its kube-vip manifest; the workers' joins come in the last operation."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    simulated(monkeypatch, tmp_path)
    path = write_simulated_spec(data(), tmp_path, "k8s.yaml")
    hosts = plan(load_cluster(path), limit="kcp[1-3],kgpu01").as_dict()["hosts"]
    for name in ("kcp2", "kcp3"):
        joins = [op for op in hosts[name]["operations"] if op["layer"] == "kubernetes-join"]
        assert [s["kind"] for s in joins[0]["steps"]] == ["upload", "install", "upload"], name
    assert [op["layer"] for op in hosts["kgpu01"]["operations"]].count("kubernetes-join") == 1


# --------------------------------------------------------------------------- node_interface


def test_the_interface_pin_sets_kubelets_node_ip_in_kubeadms_configs(pki: dict[str, bytes]) -> None:
    spec = spec_of()
    init = next(yaml.safe_load_all(cfg.init_config(spec, node(spec, "kcp1"))))
    assert init["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-ip", "value": "198.51.100.10"}]
    join = cfg.join_document(spec, node(spec, "kgpu01"), "abcdef.0123456789abcdef", "sha256:00")
    assert join["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-ip", "value": "198.51.100.101"}]
    assert unknown_fields("InitConfiguration", init) == [] and unknown_fields("JoinConfiguration", join) == []
    assert {k for a in join["nodeRegistration"]["kubeletExtraArgs"] for k in a} == {"name", "value"}  # v1beta4 Arg
    older = data(lambda k: k.pop("frameworks"))  # Kubeflow Trainer needs 1.31
    old = parse_spec(yaml_text.dump({**older, "versions": {**older["versions"], "kubernetes": "1.30.8"}}), "k.yaml")
    assert next(yaml.safe_load_all(cfg.init_config(old, node(old, "kcp1"))))["nodeRegistration"][
        "kubeletExtraArgs"
    ] == {"node-ip": "198.51.100.10"}  # v1beta3: a map
    none = spec_of(lambda k: k.update(node_interface=None, api_endpoint="198.51.100.9"))
    assert (
        "kubeletExtraArgs"
        not in next(yaml.safe_load_all(cfg.init_config(none, node(none, "kcp1"))))["nodeRegistration"]
    )


#: flanneld's container in kube-flannel.yml at v0.26.1 (Documentation/kube-flannel.yml, lines 161-167).
FLANNELD = """\
      - name: kube-flannel
        image: docker.io/flannel/flannel:v0.26.1
        command:
        - /opt/bin/flanneld
        args:
        - --ip-masq
        - --kube-subnet-mgr
        resources:
"""


def test_flannel_is_pinned_to_the_interface(tmp_path: Path) -> None:
    spec = spec_of()
    cni = cni_addon(spec)
    assert "iface:ens1f0" in cni.digest
    edit = next(p for p in (cni.command or "").split(" && sed ") if "--iface" in p)
    manifest = tmp_path / "kube-flannel.yml"
    manifest.write_text(FLANNELD)
    command = "sed " + edit.split(" && KUBECONFIG=")[0] if not edit.startswith("sed") else edit
    command = command.replace("/var/lib/gpuforge/downloads/kube-flannel-v0.28.9.yml", str(manifest))
    assert subprocess.run(["sh", "-c", command], capture_output=True).returncode == 0
    assert "        - --kube-subnet-mgr\n        - --iface=ens1f0\n        resources:" in manifest.read_text()
    manifest.write_text(FLANNELD.replace("- --kube-subnet-mgr", "- --kube-subnet-manager"))  # not the known block
    cp = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert cp.returncode != 0 and "cannot pin flannel to ens1f0" in cp.stderr
