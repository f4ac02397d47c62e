"""``kubernetes.network_operator``: its defaults, field types and cross-field rules. Each bad value or
combination is refused with a message naming its field; ``gpuforge check`` exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuforge.spec.network_operator_rules import fabric_groups, network_operator_on
from tests import yaml_text
from tests.helpers import inventory
from tests.network_operator.conftest import data, group, operator, problems, spec_of

AT = "kubernetes.network_operator"


def test_on_by_default_exactly_when_a_kubernetes_group_has_a_fabric() -> None:
    assert not network_operator_on(inventory("k8s-gpu-operator"))  # no fabric: nothing changes for it
    spec = spec_of(data())
    assert network_operator_on(spec) and [g.name for g in fabric_groups(spec)] == ["gpu", "infer"]
    off = data()
    operator(off)["enabled"] = False
    assert not network_operator_on(spec_of(off))
    no = spec_of(data()).kubernetes.network_operator  # type: ignore[union-attr]
    assert (no.version, no.namespace, no.resource_name, no.rdma_hca_max, no.ofed_driver, no.peermem) == (
        "26.4.1", "nvidia-network-operator", "rdma_shared_device_a", 63, False, True,
    )  # fmt: skip


def test_not_on_a_slurm_cluster() -> None:
    assert not network_operator_on(inventory("slurm-h100"))  # its groups have fabrics, but no Kubernetes


def test_enabled_without_a_fabric_is_refused() -> None:
    d = yaml.safe_load(Path("inventories/k8s-gpu-operator.yaml").read_text())
    d["kubernetes"]["network_operator"] = {"enabled": True}
    assert f"{AT}.enabled: no node group with a Kubernetes role declares a fabric" in problems(d)


def test_an_unknown_release_is_refused() -> None:
    d = data()
    operator(d)["version"] = "25.10.0"
    assert f"{AT}.version: gpuforge knows the component images of Network Operator 26.4.1, not 25.10.0" in problems(d)


def test_the_driver_container_needs_doca_on_every_group() -> None:
    d = data()
    operator(d)["ofed_driver"] = True
    assert f"{AT}.ofed_driver: the DOCA-OFED driver container replaces" in problems(d)
    assert "group(s) gpu, infer use stack: distro" in problems(d)


def test_listed_hcas_need_interface_names() -> None:
    d = data(type="infiniband", hcas=["mlx5_0", "mlx5_1"])
    assert f"{AT}.if_names: group(s) gpu, infer list their hcas" in problems(d)
    operator(d)["if_names"] = ["ibp24s0", "ibp41s0"]
    assert spec_of(d).kubernetes.network_operator.if_names == ["ibp24s0", "ibp41s0"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("resource_name", "rdma-shared", "is not an RDMA resource name"),  # the plugin refuses '-'
        ("resource_name", "_rdma", "is not an RDMA resource name"),
        ("resource_name", "a" * 64, "is not an RDMA resource name"),
        ("rdma_hca_max", 0, "greater than or equal to 1"),
        ("namespace", "Nvidia_Net", "must match"),
        ("version", "v26.4.1", "a version such as"),
        ("if_names", ["eth0", "eth0"], "an interface is listed more than once"),
        ("if_names", ["a/b"], "is not a network interface name"),
        ("wait_minutes", 0, "greater than or equal to 1"),
    ],
)
def test_bad_values_name_their_field(field: str, value: object, says: str) -> None:
    d = data()
    operator(d)[field] = value
    text = problems(d)
    assert f"{AT}.{field}" in text and says in text


def test_check_exits_2_naming_the_field(tmp_path: Path) -> None:
    d = data()
    operator(d)["ofed_driver"] = True
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text.dump(d))
    res = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert f"{AT}.ofed_driver" in res.stdout + res.stderr


def test_the_driver_container_with_doca_everywhere_loads() -> None:
    d = data(type="infiniband", stack="doca", doca_version="3.2.1",
             doca_key_fingerprint="0123456789ABCDEF0123456789ABCDEF01234567")  # fmt: skip
    operator(d)["ofed_driver"] = True
    assert spec_of(d).kubernetes.network_operator.ofed_driver  # type: ignore[union-attr]
    assert group(d, "gpu")["fabric"]["stack"] == "doca"
