"""Kubernetes renderers, checked against the GPU Operator chart values, the device plugin's
config examples and the Kueue / Volcano CRDs (``../shared/reference/upstream/``)."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from gpuforge.render import kubernetes as k8s
from gpuforge.render import nvidia
from gpuforge.render.files import Secrets
from gpuforge.spec import resolve_nodes
from gpuforge.spec.model import Spec
from gpuforge.spec.types import k8s_name
from tests import helpers
from tests.helpers import UPSTREAM, inventory, needs_upstream
from tests.render.test_nvidia import merge_deep as merge_containerd2

SECRETS = Secrets.redacted()


def variant(change: Callable[[dict[str, Any]], None], name: str = "k8s-gpu-operator") -> Spec:
    return helpers.variant(name, change)


def operator(**kw: Any) -> Spec:
    return variant(lambda d: d["kubernetes"]["gpu_operator"].update(kw))


def batch_queue(**kw: Any) -> Spec:
    return variant(lambda d: d["kubernetes"]["batch_queue"].update(kw))


def upstream_yaml(*parts: str) -> Any:
    return yaml.safe_load(UPSTREAM.joinpath(*parts).read_text())


# --------------------------------------------------------------------------- GPU Operator values


def leaf_paths(data: dict[str, Any], upstream: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Key paths of ``data``, each checked to exist in ``upstream`` with a value of the same kind.

    Below an upstream mapping that is empty (``data: {}``), keys are free (user-defined).
    """
    for key, value in data.items():
        path = (*prefix, key)
        assert isinstance(upstream, dict) and key in upstream, f"{'.'.join(path)} is not in the chart's values.yaml"
        theirs = upstream[key]
        if isinstance(value, dict) and theirs != {}:
            assert isinstance(theirs, dict), f"{'.'.join(path)} is not a mapping upstream"
            yield from leaf_paths(value, theirs, path)
        else:
            if theirs is not None and not (isinstance(theirs, dict) and theirs == {}):
                assert type(value) is type(theirs), f"{'.'.join(path)}: {type(value)} vs upstream {type(theirs)}"
            yield path


VALUE_VARIANTS: dict[str, Callable[[], Spec]] = {
    "example": lambda: inventory("k8s-gpu-operator"),
    "operator-driver-toolkit": lambda: operator(driver="operator", toolkit="operator"),
    "time-slicing": lambda: operator(time_slicing_replicas=4),
    "no-exporter": lambda: operator(dcgm_exporter=False),
}


@needs_upstream
@pytest.mark.parametrize("name", sorted(VALUE_VARIANTS))
def test_values_key_paths_exist_upstream(name: str) -> None:
    upstream = upstream_yaml("gpu-operator", "values.yaml")
    spec = VALUE_VARIANTS[name]()
    text = k8s.gpu_operator_values_yaml(spec)
    values = yaml.safe_load(text)
    assert values == k8s.gpu_operator_values(spec)
    assert list(leaf_paths(values, upstream))


def test_values_follow_the_spec() -> None:
    host = k8s.gpu_operator_values(inventory("k8s-gpu-operator"))
    policy = {  # the driver upgrade controller at the chart's own defaults (driver_upgrade's defaults)
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "gpuPodDeletion": {"timeoutSeconds": 300},
        "drain": {"enable": False, "timeoutSeconds": 300},
    }
    assert host["driver"] == {"enabled": False, "upgradePolicy": policy}
    assert host["toolkit"] == {"enabled": False}
    assert host["mig"] == {"strategy": "mixed"}
    assert host["dcgmExporter"]["enabled"] is False  # the example runs DCGM and its exporter on the host
    assert host["migManager"] == {"enabled": False}
    assert host["devicePlugin"] == {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]}

    def operator_stack(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"].update(driver="operator", toolkit="operator", dcgm_exporter=True)
        d["dcgm"] = {"enabled": False, "exporter": False}  # one host engine: the operator's exporter's own

    op = k8s.gpu_operator_values(variant(operator_stack))
    driver = {"enabled": True, "version": "595.91.07", "kernelModuleType": "open", "upgradePolicy": policy}
    assert op["driver"] == driver
    assert op["toolkit"] == {
        "enabled": True,
        "version": "v1.20.0",
        "env": [
            {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
            {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
        ],
    }
    assert op["devicePlugin"] == host["devicePlugin"]
    assert op["dcgmExporter"]["enabled"] is True


def test_unprivileged_pods_get_only_the_gpus_they_request() -> None:
    """GPU Operator docs, Security Considerations, "Preventing Unprivileged Access to GPUs": the
    toolkit ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers and accepts the device
    plugin's volume mounts; the plugin runs with DEVICE_LIST_STRATEGY=volume-mounts. The host's
    toolkit is configured on Kubernetes GPU nodes only (the nvidia-container-toolkit layer)."""
    spec = inventory("k8s-gpu-operator")
    nodes = {n.name: n for n in resolve_nodes(spec)}
    assert nvidia.restrict_unprivileged_gpus(spec, nodes["kgpu01"])
    assert nvidia.restrict_unprivileged_gpus(spec, nodes["kinf01"])
    assert not nvidia.restrict_unprivileged_gpus(spec, nodes["kcp1"])  # no GPU, no toolkit
    op = operator(toolkit="operator")
    assert not nvidia.restrict_unprivileged_gpus(op, next(n for n in resolve_nodes(op) if n.name == "kgpu01"))
    slurm = inventory("slurm-h100")
    assert not any(nvidia.restrict_unprivileged_gpus(slurm, n) for n in resolve_nodes(slurm))
    assert nvidia.UNPRIVILEGED_GPU_SETTINGS == {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "accept-nvidia-visible-devices-as-volume-mounts": True,
    }
    names = {e["name"].lower().replace("_", "-") for e in k8s.gpu_operator_values(op)["toolkit"]["env"]}
    assert names == set(nvidia.UNPRIVILEGED_GPU_SETTINGS)  # the operator's toolkit gets the same two


@needs_upstream
def test_values_mig_strategy_is_one_the_chart_knows() -> None:
    upstream = upstream_yaml("gpu-operator", "values.yaml")
    assert isinstance(upstream["mig"]["strategy"], str)
    for strategy in ("single", "mixed"):
        assert k8s.gpu_operator_values(operator(mig_strategy=strategy))["mig"]["strategy"] == strategy


def shape(obj: Any) -> Any:
    """The structure of a YAML document: mappings by key, lists by their items, scalar types."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        shapes = {repr(shape(i)) for i in obj}
        assert len(shapes) == 1, "list items differ in structure"
        return [shape(obj[0])]
    return type(obj).__name__


@needs_upstream
def test_time_slicing_config_matches_device_plugin_format() -> None:
    standalone = upstream_yaml("k8s-device-plugin", "time-slicing-config.yaml")
    readme = upstream_yaml("k8s-device-plugin", "readme-time-slicing-example.yaml")
    values = k8s.gpu_operator_values(operator(time_slicing_replicas=4))
    config = values["devicePlugin"]["config"]
    assert config["create"] is True
    assert config["default"] in config["data"]
    ours = yaml.safe_load(config["data"][config["default"]])
    assert ours == k8s.time_slicing_config(operator(time_slicing_replicas=4))
    # Same structure as the standalone upstream file; the README example is that minus renameByDefault.
    assert shape(ours) == shape(standalone)
    assert set(shape(readme)["sharing"]["timeSlicing"]) <= set(shape(ours)["sharing"]["timeSlicing"])
    assert ours["version"] == standalone["version"] == "v1"
    resources = ours["sharing"]["timeSlicing"]["resources"]
    assert resources[0] == {"name": "nvidia.com/gpu", "replicas": 4}
    # mig strategy mixed in the example: MIG devices are their own resources, shared too.
    assert {"name": "nvidia.com/mig-1g.10gb", "replicas": 4} in resources


def test_time_slicing_off_and_single_strategy() -> None:
    assert k8s.time_slicing_config(inventory("k8s-gpu-operator")) is None
    single = k8s.time_slicing_config(operator(time_slicing_replicas=2, mig_strategy="single"))
    assert single is not None
    assert single["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 2}]


def test_time_slicing_names_a_media_extension_profile_as_the_device_plugin_does() -> None:
    """Mixed strategy: "+" in a MIG profile is "." in the device plugin's resource name (rm.go)."""

    def with_me(d: dict[str, Any]) -> None:
        d["mig"]["configs"]["all-1g"] = [{"devices": "all", "mig_devices": {"1g.10gb+me": 1, "1g.10gb": 6}}]
        d["kubernetes"]["gpu_operator"].update(time_slicing_replicas=2)

    config = k8s.time_slicing_config(variant(with_me))
    assert config is not None
    assert [r["name"] for r in config["sharing"]["timeSlicing"]["resources"]] == [
        "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me",
    ]  # fmt: skip


def test_helm_argv() -> None:
    spec = inventory("k8s-gpu-operator")
    assert k8s.helm_gpu_operator_argv(spec) == [
        "helm", "upgrade", "--install", "gpu-operator", "nvidia/gpu-operator",
        "--namespace", "gpu-operator", "--create-namespace",
        "--version", "v26.7.0", "--disable-openapi-validation",
        "-f", k8s.GPU_OPERATOR_VALUES,
    ]  # fmt: skip
    argv = k8s.helm_gpu_operator_argv(
        operator(namespace="gpu"), values_file="/srv/gpuforge/values.yaml", chart="mirror/gpu-operator"
    )
    assert argv[4:7] == ["mirror/gpu-operator", "--namespace", "gpu"]
    assert argv[-2:] == ["-f", "/srv/gpuforge/values.yaml"]


# --------------------------------------------------------------------------- CRD validation


def strict(schema: Any) -> Any:
    """The CRD schema as the API server's strict field validation applies it: objects with
    declared properties reject unknown ones (unless they preserve unknown fields)."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_version(path: tuple[str, ...], api_version: str) -> dict[str, Any]:
    crd = upstream_yaml(*path)
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)


CRDS = {
    "ResourceFlavor": ("kueue", "kueue.x-k8s.io_resourceflavors.yaml"),
    "ClusterQueue": ("kueue", "kueue.x-k8s.io_clusterqueues.yaml"),
    "LocalQueue": ("kueue", "kueue.x-k8s.io_localqueues.yaml"),
    "Queue": ("volcano", "scheduling.volcano.sh_queues.yaml"),
}


def validate(doc: dict[str, Any]) -> dict[str, Any]:
    """Validate one manifest against its CRD version's openAPIV3Schema; return that version."""
    path = CRDS[doc["kind"]]
    crd = upstream_yaml(*path)
    assert crd["spec"]["names"]["kind"] == doc["kind"]
    version = crd_version(path, doc["apiVersion"])
    assert version["served"] is True
    schema = strict(version["schema"]["openAPIV3Schema"])
    jsonschema.validate(doc, schema, cls=jsonschema.Draft7Validator)
    if crd["spec"]["scope"] == "Namespaced":
        assert doc["metadata"].get("namespace")
    else:
        assert "namespace" not in doc["metadata"]
    return version


def test_strict_schema_rejects_unknown_fields() -> None:
    schema = strict({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {}}}}})
    jsonschema.validate({"spec": {"a": 1}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": {"b": 1}}, schema)


@needs_upstream
def test_kueue_manifests_validate_against_crds() -> None:
    spec = inventory("k8s-gpu-operator")
    docs = k8s.kueue_manifests(spec)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace"] * 2 + ["ResourceFlavor"] * 3 + ["ClusterQueue"] * 2 + ["LocalQueue"] * 2
    for doc in docs:
        if doc["kind"] == "Namespace":
            assert doc["apiVersion"] == "v1"
            continue
        version = validate(doc)
        # The version the v0.19.2 CRDs serve and store.
        assert version["storage"] is True
        assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta2"


@needs_upstream
def test_kueue_quotas_cohort_and_queues() -> None:
    spec = inventory("k8s-gpu-operator")
    docs = k8s.kueue_manifests(spec)
    cqs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ClusterQueue"}
    assert set(cqs) == {"vision", "language"}
    assert {cq["cohortName"] for cq in cqs.values()} == {"kgpu"}
    vision = cqs["vision"]["resourceGroups"][0]
    # the inference nodes' MIG devices are resources of their own (mixed strategy)
    assert vision["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    # a flavor per k8s-worker group, the one without GPUs first; every flavor lists every covered resource
    assert [f["name"] for f in vision["flavors"]] == ["mon", "gpu", "infer"]
    assert all([r["name"] for r in f["resources"]] == vision["coveredResources"] for f in vision["flavors"])
    quota = {f["name"]: {r["name"]: r for r in f["resources"]} for f in vision["flavors"]}
    # the tenant's 32 GPUs and borrowing limit 16 are all in the group with whole GPUs
    assert quota["gpu"]["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 32, "borrowingLimit": 16}
    assert quota["infer"]["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 0}  # all in MIG
    # 32 of the workers' 80 GPUs: 2/5 of each group's CPUs, memory and MIG devices, rounded down
    assert quota["gpu"]["cpu"]["nominalQuota"] == 1792 * 2 // 5 == 716
    assert quota["gpu"]["memory"]["nominalQuota"] == f"{15624 * 2 // 5}Gi"
    assert quota["infer"]["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 112 * 2 // 5 == 44
    assert quota["infer"]["cpu"]["nominalQuota"] == 448 * 2 // 5 == 179  # MIG work needs CPUs there too
    assert quota["mon"]["cpu"]["nominalQuota"] == 0  # 2/5 of one CPU
    lang = {f["name"]: {r["name"]: r for r in f["resources"]} for f in cqs["language"]["resourceGroups"][0]["flavors"]}
    assert all("borrowingLimit" not in f["nvidia.com/gpu"] for f in lang.values())
    groups = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ResourceFlavor"}
    assert groups["gpu"] == {"nodeLabels": {"gpuforge.dev/node-group": "gpu"}}  # the node-labels add-on's label
    flavors = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceFlavor"}
    for cq in cqs.values():
        assert {f["name"] for g in cq["resourceGroups"] for f in g["flavors"]} <= flavors
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    lqs = [d for d in docs if d["kind"] == "LocalQueue"]
    assert {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in lqs} == {
        ("team-vision", "vision"),
        ("team-language", "language"),
    }
    assert {q["metadata"]["namespace"] for q in lqs} <= namespaces
    # Each ClusterQueue admits its tenant's namespace only.
    assert cqs["vision"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}}
    # The CRD's CEL rule: borrowingLimit must be nil when cohort is empty.
    rule = crd_version(CRDS["ClusterQueue"], "kueue.x-k8s.io/v1beta2")["schema"]["openAPIV3Schema"]["properties"]
    assert "borrowingLimit must be nil when cohort is empty" in str(rule["spec"])


@needs_upstream
def test_kueue_older_release_uses_v1beta1() -> None:
    spec = batch_queue(version="v0.14.2")
    docs = k8s.kueue_manifests(spec)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta1"
            validate(doc)
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    assert cq["spec"]["cohort"] == "kgpu" and "cohortName" not in cq["spec"]
    assert k8s.kueue_api_version("v0.16.0") == "kueue.x-k8s.io/v1beta2"
    assert k8s.kueue_api_version("0.15.9") == "kueue.x-k8s.io/v1beta1"


@needs_upstream
def test_volcano_queues_validate_against_crd() -> None:
    spec = batch_queue(kind="volcano")
    docs = k8s.volcano_manifests(spec)
    queues = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Queue"}
    assert set(queues) == {"vision", "language"}
    for doc in queues.values():
        validate(doc)
    assert queues["vision"]["spec"]["capability"] == {"nvidia.com/gpu": 48}
    # No borrowing limit: may grow to every worker GPU (8 x 8 + 2 x 8).
    assert queues["language"]["spec"]["capability"] == {"nvidia.com/gpu": 80}
    # 2/5 of the workers' 2241 CPUs and 19531 GiB, rounded down once
    assert queues["vision"]["spec"]["deserved"] == {"cpu": 896, "memory": "7812Gi", "nvidia.com/gpu": 32}


def test_volcano_gets_the_capacity_plugin_its_quotas_need() -> None:
    """deserved is honoured by the capacity plugin only, which cannot run beside proportion
    (volcano docs/user-guide/how_to_use_capacity_plugin.md)."""
    docs = k8s.volcano_manifests(batch_queue(kind="volcano"))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"] == {"name": "volcano-scheduler-configmap", "namespace": "volcano-system"}
    conf = yaml.safe_load(str(cm["data"]["volcano-scheduler.conf"]))
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "capacity" in plugins and "proportion" not in plugins
    assert "reclaim" in [a.strip() for a in conf["actions"].split(",")]
    text = k8s.batch_queue_file(batch_queue(kind="volcano"))
    assert text is not None and "name: capacity" in text.data.decode()  # a literal block, as upstream writes it
    assert not [d for d in k8s.kueue_manifests(batch_queue(kind="kueue")) if d["kind"] == "ConfigMap"]


def test_operator_cdi_only_with_the_operators_toolkit() -> None:
    """cdi.enabled needs the operator's toolkit to configure the runtime (NVIDIA Cloud Native Stack
    sets it only then); with the host's toolkit the host writes the CDI spec instead."""
    host = operator(toolkit="host")
    assert host.container_runtime.cdi and k8s.gpu_operator_values(host)["cdi"] == {"enabled": False}
    assert k8s.gpu_operator_values(operator(toolkit="operator"))["cdi"] == {"enabled": True}
    no_cdi = variant(lambda d: (d["container_runtime"].update(cdi=False), d["kubernetes"]["gpu_operator"].update(
        toolkit="operator")))  # fmt: skip
    assert k8s.gpu_operator_values(no_cdi)["cdi"] == {"enabled": False}


def test_k8s_names() -> None:
    assert k8s_name("team_a") == "team-a"
    with pytest.raises(ValueError):
        k8s_name("___")


# --------------------------------------------------------------------------- files per node

PREREQS = {k8s.MODULES_LOAD, k8s.K8S_SYSCTL}


def files_of(spec: Spec, name: str) -> dict[str, str]:
    node = next(n for n in resolve_nodes(spec) if n.name == name)
    return {f.path: str(f.content) for f in k8s.kubernetes_files(spec, node, SECRETS)}


def test_which_node_gets_what() -> None:
    spec = inventory("k8s-gpu-operator")
    got = {n.name: set(files_of(spec, n.name)) for n in resolve_nodes(spec)}
    frameworks = {
        "/etc/gpuforge/k8s/kuberay-values.yaml",
        "/etc/gpuforge/k8s/trainer-values.yaml",
        "/etc/gpuforge/k8s/examples/raycluster-gpu.yaml",
        "/etc/gpuforge/k8s/examples/trainjob-pytorch.yaml",
    }
    assert got.pop("kcp1") == PREREQS | {k8s.GPU_OPERATOR_VALUES, k8s.KUEUE_MANIFESTS, k8s.KUEUE_CONFIG} | frameworks
    assert all(paths == PREREQS for paths in got.values())
    assert all(p.startswith(k8s.MANIFEST_DIR + "/") for p in (k8s.GPU_OPERATOR_VALUES, k8s.KUEUE_MANIFESTS))
    volcano = batch_queue(kind="volcano")
    values = {"/etc/gpuforge/k8s/kuberay-values.yaml", "/etc/gpuforge/k8s/trainer-values.yaml"}  # no examples
    assert set(files_of(volcano, "kcp1")) == PREREQS | {k8s.GPU_OPERATOR_VALUES, k8s.VOLCANO_MANIFESTS} | values
    none = batch_queue(kind="none", tenants=[])
    assert set(files_of(none, "kcp1")) == PREREQS | {k8s.GPU_OPERATOR_VALUES} | values


@pytest.mark.parametrize("inv", ["slurm-h100", "lab"])
def test_slurm_specs_get_nothing(inv: str) -> None:
    spec = inventory(inv)
    assert all(k8s.kubernetes_files(spec, n, SECRETS) == [] for n in resolve_nodes(spec))


def test_prerequisites() -> None:
    spec = inventory("k8s-gpu-operator")
    files = files_of(spec, "kgpu01")
    modules = [line for line in files[k8s.MODULES_LOAD].splitlines() if line and not line.startswith("#")]
    assert modules == ["overlay", "br_netfilter"]
    sysctl: dict[str, str] = {}
    for line in files[k8s.K8S_SYSCTL].splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            sysctl[key.strip()] = value.strip()
    assert sysctl == {
        "net.ipv4.ip_forward": "1",
        "net.bridge.bridge-nf-call-iptables": "1",
        "net.bridge.bridge-nf-call-ip6tables": "1",
    }


def test_manifest_file_parses_back() -> None:
    spec = inventory("k8s-gpu-operator")
    text = files_of(spec, "kcp1")[k8s.KUEUE_MANIFESTS]
    assert list(yaml.safe_load_all(text)) == k8s.kueue_manifests(spec)


def _render_all(spec: Spec) -> list[tuple[str, str, bytes]]:
    return [(n.name, f.path, f.data) for n in resolve_nodes(spec) for f in k8s.kubernetes_files(spec, n, SECRETS)]


def test_deterministic() -> None:
    first = _render_all(inventory("k8s-gpu-operator"))
    assert first and first == _render_all(inventory("k8s-gpu-operator"))
    ts = operator(time_slicing_replicas=3)
    assert _render_all(ts) == _render_all(operator(time_slicing_replicas=3))


# --------------------------------------------------------------------------- containerd on Kubernetes GPU nodes


def containerd_of(spec: Spec, name: str) -> dict[str, Any]:
    """containerd's effective CRI config on ``name`` (config.toml and the nvidia drop-in, merged
    key by key as containerd 2.x does; 1.x replaces the CRI section with the drop-in's, which
    repeats runc, so both give the same runtimes and default)."""
    node = next(n for n in resolve_nodes(spec) if n.name == name)
    files = {f.path: f.data for f in nvidia.nvidia_files(spec, node, SECRETS)}
    merged = tomllib.loads(files[nvidia.CONTAINERD_CONFIG].decode())
    if nvidia.CONTAINERD_NVIDIA_DROPIN in files:
        dropin = tomllib.loads(files[nvidia.CONTAINERD_NVIDIA_DROPIN].decode())
        merged = merge_containerd2(merged, dropin)
    cri: dict[str, Any] = merged["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    return cri


def test_kubernetes_gpu_nodes_with_the_host_toolkit_run_nvidia_as_the_default_runtime() -> None:
    """GPU Operator docs, "Pre-Installed NVIDIA GPU Drivers and NVIDIA Container Toolkit" (driver.enabled=false,
    toolkit.enabled=false): "ensure that the default runtime is set to nvidia". A pod without
    runtimeClassName (the validator's CUDA sample) otherwise runs under runc and sees no GPU."""
    spec = inventory("k8s-gpu-operator")
    assert not spec.container_runtime.nvidia_default  # the spec does not ask for it: Kubernetes needs it
    assert not k8s.gpu_operator_values(spec)["toolkit"]["enabled"]
    for name in ("kgpu01", "kinf01"):
        cri = containerd_of(spec, name)
        assert cri["default_runtime_name"] == "nvidia"
        assert cri["runtimes"]["nvidia"]["options"]["BinaryName"] == nvidia.NVIDIA_RUNTIME_BIN
        assert set(cri["runtimes"]) == {"nvidia", "runc"}
    for name in ("kcp1", "kmon1"):  # no GPU: no nvidia runtime
        cri = containerd_of(spec, name)
        assert (cri["default_runtime_name"], set(cri["runtimes"])) == ("runc", {"runc"})


def test_the_operators_toolkit_configures_the_runtime_itself() -> None:
    """toolkit: operator: the host gets no nvidia runtime (the toolkit container sets it up)."""
    spec = operator(toolkit="operator")
    cri = containerd_of(spec, "kgpu01")
    assert (cri["default_runtime_name"], set(cri["runtimes"])) == ("runc", {"runc"})


@pytest.mark.parametrize("default", [False, True])
def test_slurm_gpu_nodes_keep_the_specs_choice(default: bool) -> None:
    spec = helpers.variant("slurm-h100", lambda d: d["container_runtime"].update(nvidia_default=default))
    gpu = next(n for n in resolve_nodes(spec) if n.hardware.gpu is not None and n.name.startswith("gpu"))
    cri = containerd_of(spec, gpu.name)
    assert set(cri["runtimes"]) == {"nvidia", "runc"}
    assert cri["default_runtime_name"] == ("nvidia" if default else "runc")
