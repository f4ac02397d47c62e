"""The default and example pins against upstream's cited support windows, as of the tables' review date.

Each expectation is written from the cited page (``gpuforge.spec.support_windows.SOURCES``), not
computed from the table; the date is the tables' ``REVIEWED`` constant, never the clock (the clock
is ``bench/pinned_versions.py --strict``'s business).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpuforge.spec import load_spec, parse_spec
from gpuforge.spec import nvidia_releases as rel
from gpuforge.spec import support_windows as win
from gpuforge.spec.artifact_digests import known_digest
from gpuforge.spec.k8s_model import BatchQueue
from gpuforge.spec.k8s_upstream import (
    CNI_DEFAULT_VERSIONS,
    QUEUE_DEFAULT_VERSIONS,
    cni_manifest,
    helm_tarball,
    queue_controller_manifest,
)
from gpuforge.spec.model import Versions
from gpuforge.spec.nvidia_support import _release_tuple
from gpuforge.spec.spec_warnings import all_warnings
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
K8S = "inventories/k8s-gpu-operator.yaml"
NO_CITE = "network-operator-platforms"


def k8s_example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(yaml.safe_load((REPO / K8S).read_text())))
    return data


def warnings_of(data: dict[str, Any]) -> list[str]:
    return [w.format() for w in all_warnings(parse_spec(yaml_text.dump(data)), win.REVIEWED)]


def test_the_review_date_is_a_constant() -> None:
    assert win.REVIEWED.isoformat() == "2026-11-29"


def test_default_helm_supports_the_default_kubernetes() -> None:
    """helm.sh version skew: '4.2.x | 1.36.x - 1.33.x'; the default Kubernetes is 1.36."""
    v = Versions()
    assert (v.helm, v.kubernetes.rsplit(".", 1)[0]) == ("4.2.4", "1.36")
    assert win.window_problem("Helm", v.helm, win.HELM_KUBERNETES, v.kubernetes, "helm-skew-4") is None
    assert known_digest(helm_tarball(v.helm)[0]) is not None  # published in the release notes


def test_helm_3_16_is_outside_1_36_and_says_so() -> None:
    """The old pin: '3.16.x | 1.31.x - 1.28.x' (the reviewer's finding)."""
    data = k8s_example()
    data["versions"]["helm"] = "3.16.3"
    found = [w for w in warnings_of(data) if w.startswith("versions.helm")]
    assert found and found[0].startswith(
        "versions.helm: Kubernetes 1.36.4 is outside Helm 3.16.3's supported range 1.28-1.31 (Helm Version Support"
    )


def test_a_helm_the_table_lacks_is_a_warning_not_a_refusal() -> None:
    data = k8s_example()
    data["versions"]["helm"] = "4.9.1"
    found = [w for w in warnings_of(data) if w.startswith("versions.helm")]
    assert found == [
        f"versions.helm: Helm 4.9.1 is not in gpuforge's table, so its Kubernetes range could not be checked "
        f"(known: 4.2, 4.1, 4.0, 3.21, 3.20, 3.19, 3.18, 3.17, 3.16; {win.SOURCES['helm-skew-4'].title})"
    ]


def test_helm_3_is_reported_after_its_last_security_fix() -> None:
    """Helm 3 security fixes end 2027-02-10 (helm3-eol); 3.21 covers 1.33-1.36 until then."""
    spec = parse_spec(yaml_text.dump({**k8s_example(), "versions": {**k8s_example()["versions"], "helm": "3.21.4"}}))
    assert not [w for w in all_warnings(spec, win.REVIEWED) if w.path == "versions.helm"]
    after = win.HELM3_SECURITY_FIXES_END.replace(day=11)
    later = [w.message for w in all_warnings(spec, after) if w.path == "versions.helm"]
    assert later and later[0].startswith("Helm 3 gets no fixes after 2027-02-10")


@pytest.mark.parametrize(("plugin", "version"), [("calico", "v3.32.1"), ("flannel", "v0.28.9")])
def test_default_cni_pins_are_current_and_published(plugin: str, version: str) -> None:
    """calico 3.32 is tested with 1.34, 1.35, 1.36; flannel publishes no Kubernetes range."""
    assert CNI_DEFAULT_VERSIONS[plugin] == version
    assert known_digest(cni_manifest(plugin, version)[0]) is not None
    if plugin == "calico":
        assert (
            win.window_problem("Calico", version, win.CALICO_KUBERNETES, Versions().kubernetes, "calico-requirements")
            is None
        )
    data = k8s_example()
    data["kubernetes"]["cni"] = {"plugin": plugin}
    assert not [w for w in warnings_of(data) if w.startswith("kubernetes.cni")]


def test_the_old_calico_pin_is_outside_1_36() -> None:
    """Calico 3.29 is tested with v1.29 to v1.32 only."""
    data = k8s_example()
    data["kubernetes"]["cni"] = {"plugin": "calico", "version": "v3.29.1"}
    assert (
        "kubernetes.cni.version: Kubernetes 1.36.4 is outside Calico v3.29.1's supported range 1.29-1.32"
        in "\n".join(warnings_of(data))
    )


def test_the_gpu_operators_component_pins_are_the_defaults() -> None:
    """GPU Operator v26.7.0's values.yaml: toolkit v1.20.0, DCGM 4.6.0, dcgm-exporter 4.6.0-4.8.3."""
    v = Versions()
    assert win.GPU_OPERATOR_COMPONENTS[v.gpu_operator] == {
        "container_toolkit": "1.20.0",
        "dcgm": "4.6.0",
        "dcgm_exporter": "4.6.0-4.8.3",
    }
    assert {f: str(getattr(v, f)) for f in win.GPU_OPERATOR_COMPONENTS[v.gpu_operator]} == win.GPU_OPERATOR_COMPONENTS[
        v.gpu_operator
    ]
    example = yaml.safe_load((REPO / "inventories/slurm-h100.yaml").read_text())["versions"]
    assert (example["container_toolkit"], example["dcgm"], example["dcgm_exporter"]) == (
        "1.20.0",
        "4.6.0",
        "4.6.0-4.8.3",
    )


def test_pyxis_and_enroot_pins() -> None:
    """pyxis 0.24.0 (task-exit cleanup on Slurm 25.05+ since 0.21.0) with enroot 4.1.2 (pyxis needs >= 3.1.0)."""
    v = Versions()
    assert (v.pyxis, v.enroot) == ("0.24.0", "4.1.2")
    assert _release_tuple(v.pyxis) >= _release_tuple(win.PYXIS_TASK_EXIT_CLEANUP)
    assert _release_tuple(v.enroot) >= _release_tuple(rel.PYXIS_MIN_ENROOT)
    assert (rel.CURRENT["pyxis"].version, rel.CURRENT["enroot"].version) == (v.pyxis, v.enroot)


def test_volcano_gets_a_volcano_release_by_default() -> None:
    """Kueue's v0.19.2 is no Volcano tag: a Volcano queue gets v1.15.1, its newest release (volcano-releases)."""
    assert BatchQueue().version == "v0.19.2"
    assert BatchQueue(kind="volcano").version == QUEUE_DEFAULT_VERSIONS["volcano"] == "v1.15.1"
    assert BatchQueue(kind="volcano", version="v1.14.4").version == "v1.14.4"
    assert known_digest(queue_controller_manifest("volcano", "v1.15.1")[0]) is not None
    with pytest.raises(ValidationError, match="Input should be 'kueue', 'volcano' or 'none'"):
        BatchQueue.model_validate({"kind": {"volcano": 1}})  # no default is looked up for a non-name


def test_volcano_and_the_network_operator_do_not_list_1_36_yet() -> None:
    """No Volcano release lists Kubernetes 1.36 (v1.15: 1.23-1.35), nor the Network Operator 26.4 (1.31-1.35):
    a spec that uses them on 1.36 is told so, and --strict fails it."""
    data = k8s_example()
    data["kubernetes"]["batch_queue"] = {"kind": "volcano"}
    assert any(
        w.startswith("kubernetes.batch_queue.version: Kubernetes 1.36.4 is outside Volcano v1.15.1's supported range "
                     "1.23-1.35")
        for w in warnings_of(data)
    )  # fmt: skip
    problem = win.window_problem("Network Operator", "26.4.1", win.NETWORK_OPERATOR_KUBERNETES, "1.36.4", NO_CITE)
    assert problem is not None and "supported range 1.31-1.35" in problem
    assert win.window_problem("Network Operator", "26.4.1", win.NETWORK_OPERATOR_KUBERNETES, "1.35.2", NO_CITE) is None


@pytest.mark.parametrize("name", ["k8s-gpu-operator", "slurm-h100"])
def test_the_examples_have_no_warnings_on_the_review_date(name: str) -> None:
    assert all_warnings(load_spec(REPO / f"inventories/{name}.yaml"), win.REVIEWED) == []


def test_every_table_row_names_a_source() -> None:
    assert set(win.SOURCES) >= {"helm-skew-4", "helm-skew-3", "helm3-eol", "calico-requirements",
                                "network-operator-platforms", "volcano-compatibility", "gpu-operator-values",
                                "pyxis-task-exit"}  # fmt: skip
    for c in win.SOURCES.values():
        assert c.title and c.where and c.section
