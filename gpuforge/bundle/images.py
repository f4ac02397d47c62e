"""The container images a site must mirror for an offline Kubernetes cluster, from what the bundle holds.

- kubeadm's control-plane images of the pinned version (``registry.k8s.io/kube-*:v<version>``);
  coredns, pause and etcd versions are kubeadm's own constants: the list says to read them with
  ``kubeadm config images list`` from the bundled kubeadm rather than guess them;
- every ``image:`` of the bundled add-on manifests (pod network, queue controller);
- the GPU Operator's component images from the bundled chart's own ``values.yaml``, merged with
  gpuforge's rendered values, so only the components the cluster enables are listed (an empty
  ``version`` means the chart's ``appVersion``, as the chart's templates do).

Each entry keeps a digest when the reference pins one (``@sha256:``); tags are marked as such.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import kubernetes as k8s
from gpuforge.spec.model import Spec

KUBEADM_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
#: GPU Operator components that run in a (non-sandbox) GPU cluster, by values.yaml section.
OPERATOR_COMPONENTS = (
    "operator", "validator", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd",
    "migManager", "nodeStatusExporter", "gds", "gdrcopy",
)  # fmt: skip


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


def _chart_files(chart: Path) -> dict[str, str]:
    """``Chart.yaml`` and ``values.yaml`` of a chart archive (top chart only)."""
    files: dict[str, str] = {}
    with tarfile.open(chart, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 2 and parts[1] in ("Chart.yaml", "values.yaml"):
                data = tar.extractfile(member)
                if data is not None:
                    files[parts[1]] = data.read().decode()
    return files


def operator_images(spec: Spec, chart: Path) -> list[dict[str, Any]]:
    """The GPU Operator images the cluster runs, from the chart's defaults and gpuforge's values."""
    files = _chart_files(chart)
    if "values.yaml" not in files:
        raise ValueError(f"{chart.name}: no values.yaml in the chart archive")
    app_version = str((yaml.safe_load(files.get("Chart.yaml", "")) or {}).get("appVersion", ""))
    values = _merge(yaml.safe_load(files["values.yaml"]) or {}, k8s.gpu_operator_values(spec))
    out = []
    for name in OPERATOR_COMPONENTS:
        section = values.get(name)
        if not isinstance(section, dict) or not section.get("image") or section.get("enabled") is False:
            continue
        version = str(section.get("version") or app_version)
        repository = str(section.get("repository") or "").rstrip("/")
        ref = f"{repository}/{section['image']}" if repository else str(section["image"])
        out.append(_entry(f"{ref}:{version}" if version else ref, f"GPU Operator: {name}"))
    return out


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
        elif a.name.endswith(".tgz"):
            images += operator_images(spec, path)
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
