"""The frameworks' files and the Kueue flavors, checked against upstream: the KubeRay and Kubeflow Trainer
charts' values.yaml, the RayCluster and TrainJob CRDs (``tests/render/upstream/``, exact copies whose git
blob hashes are checked here), Kueue's ResourceFlavor and ClusterQueue CRDs (``../shared/reference/``)."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuforge.render import k8s_frameworks as frameworks
from gpuforge.render import k8s_queues as queues
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import k8s_day2
from gpuforge.spec import k8s_frameworks as fw
from tests import yaml_text
from tests.conftest import REPO
from tests.helpers import inventory, needs_upstream, variant
from tests.render.test_kubernetes import CRDS, crd_version, leaf_paths, strict, upstream_yaml
from tests.render.test_kubernetes import validate as validate_kueue

HERE = Path(__file__).resolve().parent / "upstream"
EXAMPLE = "k8s-gpu-operator"


def local(*parts: str) -> str:
    """The text of an upstream copy here (gzip-compressed ones decompressed)."""
    path = HERE.joinpath(*parts)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def git_blob(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_upstream_copies_are_the_cited_blobs() -> None:
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{40})` \|$", (HERE / "SOURCES.md").read_text(), re.M)
    assert len(rows) == 4
    for name, blob in rows:
        assert git_blob(local(*name.split("/"))) == blob, name


def crd(*parts: str) -> dict[str, Any]:
    return yaml.safe_load(local(*parts))  # type: ignore[no-any-return]


def validate_with_crd(doc: dict[str, Any], definition: dict[str, Any]) -> None:
    """``doc`` against the served version of ``definition`` named by its apiVersion (strict: no field the
    schema does not declare), in a namespace when the CRD is namespaced."""
    group, version = doc["apiVersion"].split("/")
    assert definition["spec"]["group"] == group and definition["spec"]["names"]["kind"] == doc["kind"]
    served = next(v for v in definition["spec"]["versions"] if v["name"] == version)
    assert served["served"] is True
    jsonschema.validate(doc, strict(served["schema"]["openAPIV3Schema"]), cls=jsonschema.Draft7Validator)
    assert (definition["spec"]["scope"] == "Namespaced") == bool(doc["metadata"].get("namespace"))


# --------------------------------------------------------------------------- the charts' values


@pytest.mark.parametrize("kind", ["kueue", "volcano"])
def test_kuberay_values_exist_in_the_chart(kind: str) -> None:
    spec = variant(EXAMPLE, lambda d: d["kubernetes"]["batch_queue"].update(kind=kind, version="v1.15.1"))
    values = frameworks.kuberay_values(spec)
    assert list(leaf_paths(values, yaml.safe_load(local("kuberay", "values.yaml"))))
    # the chart takes volcano, yunikorn, kai-scheduler or scheduler-plugins; Kueue needs none
    assert values["batchScheduler"] == {"enabled": False, "name": "volcano" if kind == "volcano" else ""}


def test_trainer_values_exist_in_the_chart_and_install_the_torch_runtime() -> None:
    values = frameworks.trainer_values(inventory(EXAMPLE))
    assert list(leaf_paths(values, yaml.safe_load(local("kubeflow-trainer", "values.yaml"))))
    assert values["runtimes"] == {"torchDistributed": {"enabled": True}}  # its ClusterTrainingRuntime is the examples'


def test_the_rendered_values_files_parse_back() -> None:
    spec = inventory(EXAMPLE)
    files = {f.path: f for f in frameworks.framework_files(spec)}
    assert yaml.safe_load(files[frameworks.KUBERAY_VALUES].data) == frameworks.kuberay_values(spec)
    assert yaml.safe_load(files[frameworks.TRAINER_VALUES].data) == frameworks.trainer_values(spec)


# --------------------------------------------------------------------------- the examples


@needs_upstream
def test_the_raycluster_example_validates_against_the_crd_and_is_admitted_through_kueue() -> None:
    spec = inventory(EXAMPLE)
    doc = frameworks.raycluster_example(spec)
    assert doc is not None
    validate_with_crd(doc, crd("kuberay", "ray.io_rayclusters.yaml.gz"))
    # Kueue: the queue label names the tenant's LocalQueue in the RayCluster's namespace
    local_queues = [d for d in k8s.kueue_manifests(spec) if d["kind"] == "LocalQueue"]
    queue = doc["metadata"]["labels"][fw.QUEUE_NAME_LABEL]
    assert (doc["metadata"]["namespace"], queue) in {
        (q["metadata"]["namespace"], q["metadata"]["name"]) for q in local_queues
    }
    assert len(doc["spec"]["workerGroupSpecs"]) <= fw.KUEUE_MAX_RAY_WORKER_GROUPS
    (group,) = doc["spec"]["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["image"] == "rayproject/ray:2.52.0-gpu" and doc["spec"]["rayVersion"] == "2.52.0"
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "8"  # a whole H100 node of the gpu group
    assert worker["resources"]["requests"] == worker["resources"]["limits"]
    # its GPU pods fit the tenant's nominal quota of the gpu group's flavor (32 GPUs)
    vision = spec.kubernetes.batch_queue.tenants[0]
    quota = dict(zip([f.name for f in queues.flavors(spec)], queues.flavor_quotas(spec, vision), strict=True))
    assert group["replicas"] * 8 <= quota["gpu"]["nvidia.com/gpu"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2


@needs_upstream
def test_the_trainjob_example_validates_against_the_crd_and_runs_the_charts_runtime() -> None:
    spec = inventory(EXAMPLE)
    doc = frameworks.trainjob_example(spec)
    assert doc is not None
    validate_with_crd(doc, crd("kubeflow-trainer", "trainer.kubeflow.org_trainjobs.yaml.gz"))
    assert doc["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "default"}
    assert doc["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert doc["spec"]["trainer"]["numNodes"] == 2
    assert doc["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "8"}


def test_the_examples_are_only_where_kueue_can_admit_them() -> None:
    volcano = variant(EXAMPLE, lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1"))
    assert frameworks.raycluster_example(volcano) is None and frameworks.trainjob_example(volcano) is None

    def mig_only(d: dict[str, Any]) -> None:
        d["node_groups"] = [g for g in d["node_groups"] if g["name"] != "gpu"]
        for t in d["kubernetes"]["batch_queue"]["tenants"]:
            t["gpu_quota"] = 0

    assert frameworks.raycluster_example(variant(EXAMPLE, mig_only)) is None  # no whole GPUs
    small = variant(EXAMPLE, lambda d: d["kubernetes"]["batch_queue"]["tenants"][0].update(gpu_quota=4))
    doc = frameworks.raycluster_example(small)
    assert doc is not None
    group = doc["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 1 and group["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] == "4"  # fmt: skip


def test_example_files_say_they_are_not_applied() -> None:
    files = {f.path: f.data.decode() for f in frameworks.framework_files(inventory(EXAMPLE))}
    assert f"kubectl apply -f {frameworks.RAYCLUSTER_EXAMPLE}" in files[frameworks.RAYCLUSTER_EXAMPLE]
    assert yaml.safe_load(files[frameworks.TRAINJOB_EXAMPLE]) == frameworks.trainjob_example(inventory(EXAMPLE))
    off = variant(EXAMPLE, lambda d: d["kubernetes"].pop("frameworks"))
    assert frameworks.framework_files(off) == []


# --------------------------------------------------------------------------- Kueue: flavors and integrations


@needs_upstream
@pytest.mark.parametrize("strategy", ["mixed", "single"])
def test_flavors_and_cluster_queues_validate_and_cover_each_flavor(strategy: str) -> None:
    spec = variant(EXAMPLE, lambda d: d["kubernetes"]["gpu_operator"].update(mig_strategy=strategy))
    docs = k8s.kueue_manifests(spec)
    flavors = [d for d in docs if d["kind"] == "ResourceFlavor"]
    assert [f["metadata"]["name"] for f in flavors] == ["mon", "gpu", "infer"]
    for doc in docs:
        if doc["kind"] != "Namespace":
            validate_kueue(doc)
    rule = crd_version(CRDS["ClusterQueue"], "kueue.x-k8s.io/v1beta2")["schema"]["openAPIV3Schema"]
    assert "self.flavors.all(x, size(x.resources) == size(self.coveredResources))" in str(rule)
    for cq in (d for d in docs if d["kind"] == "ClusterQueue"):
        (group,) = cq["spec"]["resourceGroups"]
        assert [f["name"] for f in group["flavors"]] == [f["metadata"]["name"] for f in flavors]
        for flavor in group["flavors"]:  # the CRD's rule, and the same order as coveredResources
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    gpus = {q["metadata"]["name"]: sum(r["nominalQuota"] for f in q["spec"]["resourceGroups"][0]["flavors"]
                                       for r in f["resources"] if r["name"] == "nvidia.com/gpu")
            for q in docs if q["kind"] == "ClusterQueue"}  # fmt: skip
    assert gpus == {"vision": 32, "language": 32}  # exactly the spec's gpu_quota, split over the flavors


def test_given_quotas_split_exactly_and_in_proportion() -> None:
    assert queues.split(32, [0, 64, 0]) == [0, 32, 0]
    assert queues.split(10, [1, 1, 1]) == [4, 3, 3]
    assert queues.split(7, [0, 0]) == [4, 3]  # nothing offered: an equal split
    spec = variant(EXAMPLE, lambda d: d["kubernetes"]["batch_queue"]["tenants"][0].update(cpu_quota=101))
    vision = spec.kubernetes.batch_queue.tenants[0]
    cpus = [q["cpu"] for q in queues.flavor_quotas(spec, vision)]
    assert sum(cpus) == 101 and cpus[1] > cpus[2] >= cpus[0]  # by each group's CPUs (1, 1792, 448)


def test_the_kueue_configuration_enables_the_frameworks_integrations(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = inventory(EXAMPLE)
    config = yaml.safe_load(k8s.kueue_config(spec)["data"]["controller_manager_config.yaml"])  # type: ignore[index]
    listed = config["integrations"]["frameworks"]
    assert {"ray.io/raycluster", "trainer.kubeflow.org/trainjob"} <= set(listed)
    assert listed == k8s_day2.KUEUE_DEFAULT_CONFIG["v0.19.2"]["integrations"]["frameworks"]  # the release's own
    release = yaml.safe_load(yaml_text.dump(k8s_day2.KUEUE_DEFAULT_CONFIG["v0.19.2"]))
    release["integrations"]["frameworks"] = ["batch/job"]
    monkeypatch.setitem(k8s_day2.KUEUE_DEFAULT_CONFIG, "v0.19.2", release)
    config = yaml.safe_load(k8s.kueue_config(spec)["data"]["controller_manager_config.yaml"])  # type: ignore[index]
    assert config["integrations"]["frameworks"] == ["batch/job", "ray.io/raycluster", "trainer.kubeflow.org/trainjob"]


def test_the_driver_upgrade_policy_lands_in_the_operators_values() -> None:
    def policy(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"].update(
            driver="operator",
            driver_upgrade={"max_parallel_upgrades": 2, "max_unavailable": "3", "drain": True, "drain_timeout_s": 900},
        )

    values = k8s.gpu_operator_values(variant(EXAMPLE, policy))["driver"]["upgradePolicy"]
    assert values == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 2,
        "maxUnavailable": 3,  # a number of nodes is an integer (an int-or-string field)
        "gpuPodDeletion": {"timeoutSeconds": 300},
        "drain": {"enable": True, "timeoutSeconds": 900},
    }
    chart = upstream_yaml("gpu-operator", "values.yaml")["driver"]["upgradePolicy"]
    assert set(values) <= set(chart) and set(values["drain"]) <= set(chart["drain"])
    assert set(values["gpuPodDeletion"]) <= set(chart["gpuPodDeletion"])


def test_every_framework_fact_is_cited_and_used() -> None:
    """Each citation names a page or file and the section that says it, and some code names it."""
    code = "\n".join(
        p.read_text() for p in (REPO / "gpuforge").rglob("*.py") if p.name != "k8s_frameworks.py" or "render" in p.parts
    )
    for key, cite in fw.SOURCES.items():
        assert cite.title and cite.section and cite.where.startswith("https://"), key
        assert f"'{key}'" in code or f'"{key}"' in code, f"{key}: cited by no code"
