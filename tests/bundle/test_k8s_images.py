"""The images a site mirrors for the GPU Operator's Node Feature Discovery subchart and for the cluster
validator's probe: from the chart archive as ``helm package`` lays it out (subchart vendored as a
directory, or packaged as a .tgz by ``helm dependency build``), else from the pinned dependency."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.bundle import images
from gpuforge.spec import load_spec
from gpuforge.validator import k8s_probe
from tests import yaml_text
from tests.bundle.test_k8s_bundle import SPEC, UPSTREAM_CHART

# The image section of NFD's chart values and its Chart.yaml, as the GPU Operator v26.7.0 chart vendors
# them (NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/charts/node-feature-discovery/values.yaml:
# image.repository registry.k8s.io/nfd/node-feature-discovery, image.tag empty: "If not specified
# Chart.AppVersion will be used"; Chart.yaml: version 0.19.0, appVersion v0.19.0). Abridged.
NFD_VALUES = """\
image:
  repository: registry.k8s.io/nfd/node-feature-discovery
  pullPolicy: IfNotPresent
  tag:
imagePullSecrets: []
"""
NFD_CHART = "apiVersion: v2\nname: node-feature-discovery\nversion: 0.19.0\nappVersion: v0.19.0\n"
NFD = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def chart(tmp_path: Path, subchart: str | None, values: Any = None, chart_yaml: str | None = None) -> Path:
    """The gpu-operator chart archive: upstream Chart.yaml and values.yaml (v26.7.0), with the NFD
    subchart ``"dir"`` (vendored), ``"tgz"`` (packaged) or None (not carried)."""
    top = chart_yaml if chart_yaml is not None else (UPSTREAM_CHART / "Chart.yaml").read_text()
    top = top.replace("version: v1.0.0-devel", "version: v26.7.0").replace('"main-latest"', '"v26.7.0"')
    vals = (UPSTREAM_CHART / "values.yaml").read_text() if values is None else yaml_text.dump(values)
    files = {"gpu-operator/Chart.yaml": top.encode(), "gpu-operator/values.yaml": vals.encode()}
    sub = {"Chart.yaml": NFD_CHART.encode(), "values.yaml": NFD_VALUES.encode()}
    if subchart == "dir":
        files |= {f"gpu-operator/charts/node-feature-discovery/{k}": v for k, v in sub.items()}
        files["gpu-operator/charts/node-feature-discovery/templates/worker.yaml"] = b"kind: DaemonSet\n"
    elif subchart == "tgz":
        nested = _tgz({f"node-feature-discovery/{k}": v for k, v in sub.items()})
        files["gpu-operator/charts/node-feature-discovery-0.19.0.tgz"] = nested
    path = tmp_path / "gpu-operator-v26.7.0.tgz"
    path.write_bytes(_tgz(files))
    return path


def spec(tmp_path: Path, batch: str = "kueue") -> Any:
    text = SPEC.format(sources="  mode: upstream").replace("kind: kueue", f"kind: {batch}")
    if batch == "volcano":
        text = text.replace("kind: volcano", "kind: volcano\n    version: v1.15.1")
    path = tmp_path / "k8s.yaml"
    path.write_text(text)
    return load_spec(path)


def nfd_entries(s: Any, archive: Path) -> list[dict[str, Any]]:
    return [i for i in images.operator_images(s, archive) if "node-feature-discovery" in i["for"]]


@pytest.mark.parametrize("subchart", ["dir", "tgz"])
def test_nfd_image_from_the_bundled_subchart(tmp_path: Path, subchart: str) -> None:
    (entry,) = nfd_entries(spec(tmp_path), chart(tmp_path, subchart))
    assert entry == {"image": NFD, "digest": None, "for": "GPU Operator: node-feature-discovery (subchart 0.19.0)"}


def test_nfd_image_from_the_pinned_dependency_when_the_subchart_is_not_bundled(tmp_path: Path) -> None:
    (entry,) = nfd_entries(spec(tmp_path), chart(tmp_path, None))
    assert entry["image"] == NFD
    assert entry["for"] == "GPU Operator: node-feature-discovery (dependency 0.19.0, values not in the archive)"


def test_an_older_chart_spells_its_dependency_version_with_a_v(tmp_path: Path) -> None:
    """gpu-operator v25.3.0's Chart.yaml: ``version: v0.17.2`` (NFD's appVersion is v0.17.2 too)."""
    top = (UPSTREAM_CHART / "Chart.yaml").read_text().replace("version: 0.19.0", "version: v0.17.2")
    (entry,) = nfd_entries(spec(tmp_path), chart(tmp_path, None, chart_yaml=top))
    assert entry["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.17.2"


def test_the_operator_values_override_the_nfd_image(tmp_path: Path) -> None:
    values = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text())
    values["node-feature-discovery"]["image"] = {"repository": "registry.example/nfd", "tag": "v0.19.0-minimal"}
    for subchart in ("dir", None):
        (entry,) = nfd_entries(spec(tmp_path), chart(tmp_path, subchart, values))
        assert entry["image"] == "registry.example/nfd:v0.19.0-minimal"


def test_nfd_disabled_lists_no_nfd_image(tmp_path: Path) -> None:
    values = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text())
    values["nfd"]["enabled"] = False
    assert nfd_entries(spec(tmp_path), chart(tmp_path, "dir", values)) == []


def test_a_chart_without_the_nfd_dependency_lists_none(tmp_path: Path) -> None:
    top = (UPSTREAM_CHART / "Chart.yaml").read_text().split("dependencies:")[0]
    assert nfd_entries(spec(tmp_path), chart(tmp_path, None, chart_yaml=top)) == []


def test_the_validator_probe_images_are_listed(tmp_path: Path) -> None:
    """The CUDA vectorAdd sample pod, and the Kueue admission job's pod (it runs once admitted)."""
    kueue = [i["image"] for i in images.validator_images(spec(tmp_path))]
    assert kueue == [k8s_probe.CUDA_SAMPLE_IMAGE, "registry.k8s.io/pause:3.10"]
    volcano = [i["image"] for i in images.validator_images(spec(tmp_path, "volcano"))]
    assert volcano == [k8s_probe.CUDA_SAMPLE_IMAGE]
    # the list is every image the probe script itself names, and only those
    for kind, listed in (("kueue", kueue), ("volcano", volcano)):
        script = k8s_probe.probe_query(spec(tmp_path, kind) if kind == "volcano" else spec(tmp_path))
        assert list(dict.fromkeys(re.findall(r"\bimage:\s*([^\s,}\"']+)", script))) == listed, kind
