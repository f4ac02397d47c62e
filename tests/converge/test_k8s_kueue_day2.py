"""Kueue from the spec: covered resources (GPUs or MIG profiles per node group), quotas from the nodes'
hardware, and ``manageJobsWithoutQueueName`` limited to the tenants' namespaces.

The ConfigMap validates against the core v1 schema of the pinned minor; its Configuration is Kueue
v0.19.2's own (``k8s_day2.KUEUE_DEFAULT_CONFIG``, cited) with only the two settings added.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuforge.deploy.layers.k8s_addons import addons
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import k8s_day2
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.helpers import INVENTORIES


def spec_of(mutate: Any = None, name: str = "k8s-gpu-operator") -> Any:
    d = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text())
    if mutate:
        mutate(d)
    return parse_spec(yaml_text.dump(d), "k8s.yaml")


def configuration(spec: Any) -> dict[str, Any]:
    doc = k8s.kueue_config(spec)
    assert doc is not None
    assert kubernetes_validate.validate(doc, "1.36", strict=True) == "1.36"
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("kueue-system", "kueue-manager-config")
    return yaml.safe_load(doc["data"]["controller_manager_config.yaml"])  # type: ignore[no-any-return]


def test_gpu_clusters_manage_jobs_without_a_queue_label_in_the_tenants_namespaces_only() -> None:
    config = configuration(spec_of())
    assert config["manageJobsWithoutQueueName"] is True
    assert config["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                              "values": ["team-language", "team-vision"]}]
    }  # fmt: skip
    upstream = k8s_day2.KUEUE_DEFAULT_CONFIG["v0.19.2"]
    added = ("manageJobsWithoutQueueName", "managedJobsNamespaceSelector")
    assert {k: v for k, v in config.items() if k not in added} == upstream


def test_off_keeps_kueues_own_configuration_and_a_cpu_only_cluster_defaults_to_off() -> None:
    off = spec_of(lambda d: d["kubernetes"]["batch_queue"].update(manage_jobs_without_queue_name=False))
    assert configuration(off) == k8s_day2.KUEUE_DEFAULT_CONFIG["v0.19.2"]
    lab = spec_of(name="lab-k8s")
    assert not k8s.manage_jobs_without_queue_name(lab) and "manageJobsWithoutQueueName" not in configuration(lab)


def test_the_configuration_is_applied_after_the_controller_and_restarts_it() -> None:
    items = [a.name for a in addons(spec_of())]
    assert items.index("queue-controller") < items.index("queue-config") < items.index("queues")
    config = next(a for a in addons(spec_of()) if a.name == "queue-config")
    assert config.command is not None and config.command.endswith(
        "kubectl rollout status deployment/kueue-controller-manager -n kueue-system --timeout=5m"
    )
    assert "kubectl apply --server-side --force-conflicts -f /etc/gpuforge/k8s/kueue-config.yaml" in config.command


def test_an_unknown_kueue_release_cannot_take_the_setting() -> None:
    spec = spec_of(lambda d: d["kubernetes"]["batch_queue"].update(version="v0.18.6"))
    config = next(a for a in addons(spec) if a.name == "queue-config")
    assert config.command is None and "not v0.18.6" in (config.reason or "")
    off = spec_of(
        lambda d: d["kubernetes"]["batch_queue"].update(version="v0.18.6", manage_jobs_without_queue_name=False)
    )
    assert "queue-config" not in [a.name for a in addons(off)]  # the release's own default stands


def test_quotas_follow_the_hardware_and_what_the_spec_gives() -> None:
    def given(d: dict[str, Any]) -> None:
        d["kubernetes"]["batch_queue"]["tenants"][0].update(cpu_quota=100, mig_quota={"1g.10gb": 10})

    spec = spec_of(given)
    vision, language = spec.kubernetes.batch_queue.tenants
    assert k8s.tenant_quota(spec, vision) == {
        "cpu": 100,
        "memory": 19531 * 2 // 5,  # 32 of the workers' 80 GPUs: 2/5 of their memory
        "nvidia.com/gpu": 32,
        "nvidia.com/mig-1g.10gb": 10,
    }
    assert k8s.tenant_quota(spec, language)["cpu"] == 2241 * 2 // 5 == 896
    lab = spec_of(name="lab-k8s")  # no GPUs: an equal share of the workers' 2 CPUs and 2 GiB
    assert k8s.tenant_quota(lab, lab.kubernetes.batch_queue.tenants[0]) == {"cpu": 2, "memory": 2, "nvidia.com/gpu": 0}


def test_single_strategy_offers_mig_devices_as_gpus() -> None:
    spec = spec_of(lambda d: d["kubernetes"]["gpu_operator"].update(mig_strategy="single"))
    assert k8s.covered_resources(spec) == ["cpu", "memory", "nvidia.com/gpu"]
    assert k8s.worker_capacity(spec)["nvidia.com/gpu"] == 64 + 2 * 8 * 7  # whole GPUs and every 1g device


def test_a_mig_quota_of_a_profile_no_worker_offers_is_refused() -> None:
    from gpuforge.spec import SpecError

    with pytest.raises(SpecError) as e:
        spec_of(lambda d: d["kubernetes"]["batch_queue"]["tenants"][0].update(mig_quota={"3g.40gb": 1}))
    assert "kubernetes.batch_queue.tenants[0].mig_quota" in e.value.format() and "offered: 1g.10gb" in e.value.format()
