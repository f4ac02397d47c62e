"""The Network Operator's files, checked against the v26.4.1 release's own files (``upstream/``, exact
copies whose git blob hashes are checked here): its chart's values.yaml and the NicClusterPolicy CRD's
openAPIV3Schema (the same strict checker as the KubeRay and Trainer examples'); the GPU Operator's
``driver.rdma`` keys against its values.yaml in ``../shared/reference/``."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpuforge.render import k8s_network_operator as render
from gpuforge.render import kubernetes as k8s
from gpuforge.render.files import Secrets
from gpuforge.spec import network_operator as no
from gpuforge.spec import resolve_nodes
from tests.conftest import REPO
from tests.helpers import inventory, needs_upstream
from tests.network_operator.conftest import cpu_only, data, operator, spec_of, with_
from tests.render.test_k8s_frameworks import git_blob
from tests.render.test_kubernetes import leaf_paths, strict, upstream_yaml

HERE = Path(__file__).resolve().parent / "upstream"


def local(name: str) -> str:
    path = HERE / name
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def test_the_upstream_copies_are_the_cited_blobs() -> None:
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{40})` \|$", (HERE / "SOURCES.md").read_text(), re.M)
    assert len(rows) == 2
    for name, blob in rows:
        assert git_blob(local(name)) == blob, name
    assert "67fe6f47d80f9e3aefabf557f7bfa0073e9a5988" in no.SOURCES["nicclusterpolicy-crd"].title


def validate(doc: dict[str, Any]) -> None:
    """``doc`` against the served version of the release's CRD (strict: no undeclared field)."""
    crd = yaml.safe_load(local("mellanox.com_nicclusterpolicies.yaml.gz"))
    group, version = doc["apiVersion"].split("/")
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (group, doc["kind"])
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    assert served["served"] is True
    jsonschema.validate(doc, strict(served["schema"]["openAPIV3Schema"]), cls=jsonschema.Draft7Validator)
    assert crd["spec"]["scope"] == "Cluster" and "namespace" not in doc["metadata"]
    assert crd["spec"]["names"]["plural"] + "." + group == no.NIC_POLICY_RESOURCE


# --------------------------------------------------------------------------- chart values


def test_the_values_exist_in_the_chart_and_share_nfd_with_the_gpu_operator() -> None:
    spec = spec_of(data())
    values = render.network_operator_values(spec)
    chart = yaml.safe_load(local("values.yaml"))
    assert list(leaf_paths(values, chart))
    assert values["nfd"] == {"enabled": False}  # the GPU Operator's NFD serves both
    assert values["upgradeCRDs"] is True and chart["upgradeCRDs"] is True  # the chart's CRD hook


def test_without_gpus_the_network_operator_brings_nfd() -> None:
    assert render.network_operator_values(with_(cpu_only))["nfd"] == {"enabled": True}


# --------------------------------------------------------------------------- the NicClusterPolicy


def plugin(doc: dict[str, Any]) -> dict[str, Any]:
    return json.loads(doc["spec"]["rdmaSharedDevicePlugin"]["config"])


def test_the_policy_validates_and_offers_the_infiniband_hcas() -> None:
    doc = render.nic_cluster_policy(spec_of(data()))
    validate(doc)
    assert set(doc["spec"]) == {"rdmaSharedDevicePlugin"}  # the host's RDMA stack serves: no driver container
    dp = doc["spec"]["rdmaSharedDevicePlugin"]
    assert (dp["image"], dp["repository"], dp["version"]) == (
        "k8s-rdma-shared-dev-plugin", "nvcr.io/nvidia/mellanox", "network-operator-v26.4.1",
    )  # fmt: skip
    assert plugin(doc) == {"configList": [{"resourceName": "rdma_shared_device_a", "rdmaHcaMax": 63,
                           "selectors": {"linkTypes": ["infiniband"], "drivers": ["mlx5_core"]}}]}  # fmt: skip


def test_roce_soft_roce_and_named_interfaces_select_as_the_plugin_reads_them() -> None:
    assert plugin(render.nic_cluster_policy(spec_of(data(type="roce"))))["configList"][0]["selectors"] == {
        "linkTypes": ["ether"], "drivers": ["mlx5_core"]}  # fmt: skip
    soft = render.nic_cluster_policy(spec_of(data(type="roce", soft_roce=["eth1", "eth2"])))
    validate(soft)
    assert plugin(soft)["configList"][0]["selectors"] == {"linkTypes": ["ether"], "ifNames": ["eth1", "eth2"]}

    def named(d: dict[str, Any]) -> None:
        operator(d).update(if_names=["ibp24s0"], resource_name="ib_fabric", rdma_hca_max=8)

    doc = render.nic_cluster_policy(with_(named, type="infiniband", hcas=["mlx5_0"]))
    validate(doc)
    selected = {"linkTypes": ["infiniband"], "ifNames": ["ibp24s0"]}
    assert plugin(doc)["configList"] == [{"resourceName": "ib_fabric", "rdmaHcaMax": 8, "selectors": selected}]


def doca() -> dict[str, Any]:
    return {"type": "infiniband", "stack": "doca", "doca_version": "3.2.1",
            "doca_key_fingerprint": "0123456789ABCDEF0123456789ABCDEF01234567"}  # fmt: skip


def test_the_driver_container_is_the_releases_and_validates() -> None:
    doc = render.nic_cluster_policy(with_(lambda d: operator(d).update(ofed_driver=True), **doca()))
    validate(doc)
    drv = doc["spec"]["ofedDriver"]
    assert (drv["image"], drv["repository"], drv["version"]) == no.RELEASE_COMPONENTS["26.4.1"]["ofedDriver"]
    assert drv["version"] == "doca3.4.1-26.04-1.1.0.0-1"


def test_the_rendered_files_parse_back_and_live_on_the_first_control_plane_only() -> None:
    spec = spec_of(data())
    files = {f.path: f for f in render.network_operator_files(spec)}
    assert yaml.safe_load(files[render.NETWORK_OPERATOR_VALUES].data) == render.network_operator_values(spec)
    assert yaml.safe_load(files[render.NIC_CLUSTER_POLICY].data) == render.nic_cluster_policy(spec)
    nodes = {n.name: n for n in resolve_nodes(spec)}
    first = {f.path for f in k8s.kubernetes_files(spec, nodes["kcp1"], Secrets.redacted())}
    other = {f.path for f in k8s.kubernetes_files(spec, nodes["kcp2"], Secrets.redacted())}
    assert set(files) <= first and not set(files) & other
    assert render.network_operator_files(inventory("k8s-gpu-operator")) == []  # no fabric: nothing


# --------------------------------------------------------------------------- the GPU Operator's GPUDirect RDMA


@needs_upstream
def test_the_gpu_operators_driver_gets_gpudirect_rdma_values_of_its_chart() -> None:
    chart = upstream_yaml("gpu-operator", "values.yaml")["driver"]["rdma"]
    op = with_(lambda d: d["kubernetes"]["gpu_operator"].update(driver="operator"))
    rdma = k8s.gpu_operator_values(op)["driver"]["rdma"]
    assert rdma == {"enabled": True, "useHostMofed": True} and set(rdma) <= set(chart)  # peermem, host's stack

    def dmabuf_container(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"]["driver"] = "operator"
        operator(d).update(peermem=False, ofed_driver=True)

    assert k8s.gpu_operator_values(with_(dmabuf_container, **doca()))["driver"]["rdma"] == {
        "enabled": False, "useHostMofed": False}  # fmt: skip
    # a host driver: the operator's driver values act on nothing; the fabric layer loads nvidia-peermem
    assert "rdma" not in k8s.gpu_operator_values(spec_of(data()))["driver"]


def test_every_network_operator_fact_is_cited_and_used() -> None:
    code = "\n".join(p.read_text() for p in (REPO / "gpuforge").rglob("*.py") if p.name != "network_operator.py")
    for key, cite in no.SOURCES.items():
        assert cite.title and cite.section and cite.where.startswith("https://"), key
        assert f"'{key}'" in code or f'"{key}"' in code, f"{key}: cited by no code"
