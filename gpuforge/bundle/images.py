"""The container images a site must mirror for an offline Kubernetes cluster, from what the bundle holds.

- kubeadm's control-plane images of the pinned version (``registry.k8s.io/kube-*:v<version>``);
  coredns, pause and etcd versions are kubeadm's own constants: the list says to read them with
  ``kubeadm config images list`` from the bundled kubeadm rather than guess them;
- every ``image:`` of the bundled add-on manifests (pod network, queue controller);
- the GPU Operator's component images from the bundled chart's own ``values.yaml``, merged with
  gpuforge's rendered values, so only the components the cluster enables are listed (an empty
  ``version`` means the chart's ``appVersion``, as the chart's templates do);
- Node Feature Discovery, the GPU Operator chart's dependency (``condition: nfd.enabled``, on by
  default): from the subchart the archive carries (``charts/node-feature-discovery/``, or its
  packaged ``.tgz``), else from the dependency version pinned in the chart's ``Chart.yaml``;
- the NVIDIA Network Operator's (when a Kubernetes group has a fabric): the operator's and NFD's from the
  bundled chart's ``values.yaml``, and the release's component images the NicClusterPolicy names;
- the images the cluster validator's active probe runs (the CUDA vectorAdd sample, and the
  queue-admission job's image), read from the probe script itself.

Each entry keeps a digest when the reference pins one (``@sha256:``); tags are marked as such.

NFD (NVIDIA/gpu-operator v26.7.0, ``deployments/gpu-operator/``): ``Chart.yaml`` lists
``dependencies: - name: node-feature-discovery, version: 0.19.0, repository:
oci://registry.k8s.io/nfd/charts, condition: nfd.enabled``, ``values.yaml`` has ``nfd.enabled: true``
and a ``node-feature-discovery:`` section without an image; the vendored
``charts/node-feature-discovery/values.yaml`` has ``image.repository:
registry.k8s.io/nfd/node-feature-discovery`` and an empty ``image.tag`` ("If not specified
Chart.AppVersion will be used"; ``Chart.yaml`` ``appVersion: v0.19.0``), and every NFD template
(master, worker, gc, topology-updater, post-delete job) runs ``{{ .Values.image.repository }}:{{
.Values.image.tag | default .Chart.AppVersion }}``.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import k8s_network_operator as no_render
from gpuforge.render import kube_vip
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import k8s_upstream
from gpuforge.spec.model import Spec

KUBEADM_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
#: GPU Operator components that run in a (non-sandbox) GPU cluster, by values.yaml section.
OPERATOR_COMPONENTS = (
    "operator", "validator", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd",
    "migManager", "nodeStatusExporter", "gds", "gdrcopy",
)  # fmt: skip
#: The GPU Operator chart's NFD dependency (its name in ``Chart.yaml`` and its values section).
NFD_CHART = "node-feature-discovery"
#: NFD's image repository, as the NFD chart's values.yaml sets it (see the module docstring).
NFD_IMAGE_REPOSITORY = "registry.k8s.io/nfd/node-feature-discovery"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _entry(ref: str, why: str) -> dict[str, Any]:
    digest = ref.split("@", 1)[1] if "@sha256:" in ref else None
    return {"image": ref, "digest": digest, "for": why}


def manifest_images(text: str) -> Iterator[str]:
    """Every ``image:`` of the containers in a multi-document manifest."""

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    for doc in yaml.safe_load_all(text):
        yield from walk(doc)


CHART_FILES = ("Chart.yaml", "values.yaml")


def _read_chart(tar: tarfile.TarFile, prefix: str = "") -> dict[str, str]:
    """``Chart.yaml`` and ``values.yaml`` of the chart in ``tar`` (``prefix`` + those names), and of
    its NFD subchart as ``charts/node-feature-discovery/<name>``: unpacked, as ``helm package``
    keeps a vendored subchart directory, or packaged as ``charts/node-feature-discovery-<v>.tgz``
    (``helm dependency build``)."""
    files: dict[str, str] = {}
    sub = f"charts/{NFD_CHART}/"
    for member in tar.getmembers():
        parts = member.name.split("/")
        if not member.isfile() or len(parts) < 2:
            continue
        rest = "/".join(parts[1:])
        data = tar.extractfile(member)
        if data is None:
            continue
        if rest in CHART_FILES or (rest.startswith(sub) and rest[len(sub) :] in CHART_FILES):
            files[prefix + rest] = data.read().decode()
        elif not prefix and re.fullmatch(rf"charts/{NFD_CHART}-[^/]*\.tgz", rest):
            with tarfile.open(fileobj=io.BytesIO(data.read()), mode="r:gz") as nested:
                for name, text in _read_chart(nested, sub).items():
                    files.setdefault(name, text)
    return files


def _chart_files(chart: Path) -> dict[str, str]:
    """``Chart.yaml`` and ``values.yaml`` of a chart archive, and of its NFD subchart when the
    archive carries it (``charts/node-feature-discovery/Chart.yaml`` and ``.../values.yaml``)."""
    with tarfile.open(chart, "r:gz") as tar:
        return _read_chart(tar)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _yaml(text: str | None) -> dict[str, Any]:
    return _dict(yaml.safe_load(text or ""))


def nfd_image(
    chart_yaml: dict[str, Any], values: dict[str, Any], files: dict[str, str], chart: str = "GPU Operator"
) -> dict[str, Any] | None:
    """The NFD image ``chart`` (the GPU or the Network Operator's) runs (None: ``nfd.enabled`` is false,
    or the chart has no NFD dependency). ``values`` are the chart's values merged with gpuforge's."""
    if _dict(values.get("nfd")).get("enabled") is False:
        return None
    deps = [d for d in chart_yaml.get("dependencies") or [] if isinstance(d, dict) and d.get("name") == NFD_CHART]
    sub_chart = _yaml(files.get(f"charts/{NFD_CHART}/Chart.yaml"))
    if not deps and not sub_chart:
        return None
    override = _dict(values.get(NFD_CHART))
    if f"charts/{NFD_CHART}/values.yaml" in files:
        sub_values = _merge(_yaml(files[f"charts/{NFD_CHART}/values.yaml"]), override)
        app_version = str(sub_chart.get("appVersion") or "")
        source = f"subchart {sub_chart.get('version', '?')}"
    else:  # not bundled: the pinned dependency, with its chart's defaults (NFD_IMAGE_REPOSITORY, v<version>)
        version = str((deps[0] if deps else {}).get("version") or sub_chart.get("version") or "")
        sub_values = _merge({"image": {"repository": NFD_IMAGE_REPOSITORY}}, override)
        app_version = f"v{version.lstrip('v')}" if version else ""
        source = f"dependency {version or '?'}, values not in the archive"
    image = _dict(sub_values.get("image"))
    repository = str(image.get("repository") or NFD_IMAGE_REPOSITORY)
    tag = str(image.get("tag") or app_version)
    return _entry(f"{repository}:{tag}" if tag else repository, f"{chart}: {NFD_CHART} ({source})")


def _chart_values(chart: Path, overrides: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """(the archive's chart files, its Chart.yaml, its values.yaml merged with gpuforge's ``overrides``)."""
    files = _chart_files(chart)
    if "values.yaml" not in files:
        raise ValueError(f"{chart.name}: no values.yaml in the chart archive")
    return files, _yaml(files.get("Chart.yaml")), _merge(_yaml(files["values.yaml"]), overrides)


def _component_ref(section: dict[str, Any], version: str = "") -> str:
    """``repository/image:version`` of a values or NicClusterPolicy section (``version``: the default tag)."""
    repository = str(section.get("repository") or "").rstrip("/")
    ref = f"{repository}/{section['image']}" if repository else str(section["image"])
    tag = str(section.get("version") or section.get("tag") or version)
    return f"{ref}:{tag}" if tag else ref


def operator_images(spec: Spec, chart: Path) -> list[dict[str, Any]]:
    """The GPU Operator images the cluster runs, from the chart's defaults and gpuforge's values."""
    files, chart_yaml, values = _chart_values(chart, k8s.gpu_operator_values(spec))
    app_version = str(chart_yaml.get("appVersion", ""))
    out = []
    for name in OPERATOR_COMPONENTS:
        section = values.get(name)
        if not isinstance(section, dict) or not section.get("image") or section.get("enabled") is False:
            continue
        out.append(_entry(_component_ref(section, app_version), f"GPU Operator: {name}"))
    nfd = nfd_image(chart_yaml, values, files)
    if nfd is not None:
        out.append(nfd)
    return out


def network_operator_images(spec: Spec, chart: Path) -> list[dict[str, Any]]:
    """The Network Operator's images (network_operator 'network-operator-chart', 'network-operator-components'):
    the operator's own from the chart's values (tag: the chart's ``appVersion`` unless ``operator.tag`` is
    set), NFD's when the chart deploys it, and the components of the NicClusterPolicy gpuforge applies
    (the release's images), with the DOCA driver's init container when the policy has the driver."""
    files, chart_yaml, values = _chart_values(chart, no_render.network_operator_values(spec))
    operator = _dict(values.get("operator"))
    why = "Network Operator"
    out = [_entry(_component_ref(operator, str(chart_yaml.get("appVersion") or "")), f"{why}: operator")]
    nfd = nfd_image(chart_yaml, values, files, why)
    out += [nfd] if nfd is not None else []
    policy = _dict(no_render.nic_cluster_policy(spec).get("spec"))
    for name, section in policy.items():
        if isinstance(section, dict) and section.get("image"):
            out.append(_entry(_component_ref(section), f"{why}: NicClusterPolicy {name}"))
    init = _dict(_dict(operator.get("ofedDriver")).get("initContainer"))
    if "ofedDriver" in policy and init.get("enable") is not False and init.get("image"):
        out.append(_entry(_component_ref(init), f"{why}: ofedDriver init container"))
    return out


def validator_images(spec: Spec) -> list[dict[str, Any]]:
    """The images of the pods the cluster validator's active probe creates (``gpuforge validate``:
    the CUDA vectorAdd sample on a GPU node, the Kueue queue-admission job)."""
    if spec.kubernetes is None:
        return []
    kind = spec.kubernetes.batch_queue.kind
    return [_entry(ref, "gpuforge validate (cluster probe)") for ref in k8s_upstream.validator_probe_images(kind)]


def image_list(spec: Spec, out: Path) -> list[dict[str, Any]]:
    """The images of ``spec``'s cluster, from the files already in bundle ``out``."""
    if spec.kubernetes is None:
        return []
    version = spec.versions.kubernetes
    images = [_entry(f"registry.k8s.io/{name}:v{version}", "kubeadm") for name in KUBEADM_IMAGES]
    for a in arts.addon_artifacts(spec):
        path = out / "artifacts" / a.name
        if not path.is_file():
            continue
        if a.name.endswith((".yml", ".yaml")):
            images += [_entry(ref, a.name) for ref in manifest_images(path.read_text())]
        elif a.name == k8s_upstream.gpu_operator_chart_file(spec.versions.gpu_operator):  # its images
            images += operator_images(spec, path)
        elif a.name == arts.network_operator_chart_artifact(spec).name:
            images += network_operator_images(spec, path)
    images += validator_images(spec)
    images += [_entry(kube_vip.image(spec), "kube-vip (the API endpoint)")] if kube_vip.interface(spec) else []
    unique: dict[str, dict[str, Any]] = {}
    for i in images:
        unique.setdefault(i["image"], i)
    return list(unique.values())


def render_image_list(spec: Spec, images: list[dict[str, Any]]) -> str:
    """``images.txt``: one image per line, what needs it, and its digest where known."""
    lines = [
        f"# Container images cluster {spec.cluster.name} pulls (Kubernetes {spec.versions.kubernetes}).",
        "# Mirror them into the site registry. Also mirror what this prints on a node with the bundled kubeadm:",
        f"#   kubeadm config images list --kubernetes-version v{spec.versions.kubernetes}",
        "# (coredns, pause and etcd: their versions are kubeadm's own).",
    ]
    for i in images:
        lines.append(f"{i['image']}\t{i['for']}\t{i['digest'] or 'tag only (no digest published here)'}")
    return "\n".join(lines) + "\n"
