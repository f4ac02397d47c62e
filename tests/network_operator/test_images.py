"""The Network Operator's images in the offline bundle's ``images.txt``: read from the chart archive as
``helm package`` lays it out (the release's values.yaml, kept in upstream/) and from the NicClusterPolicy
gpuforge applies."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from gpuforge.bundle import images
from gpuforge.render import k8s_artifacts as arts
from tests.network_operator.conftest import CHART, cpu_only, operator, with_
from tests.network_operator.test_render import doca

UPSTREAM = Path(__file__).parent / "upstream"
# Chart.yaml of v26.4.1 as network_operator 'network-operator-chart' cites it (abridged to what images reads).
CHART_YAML = """\
apiVersion: v2
name: network-operator
version: 26.4.1
appVersion: v26.4.1
dependencies:
  - name: node-feature-discovery
    condition: nfd.enabled
"""
OPERATOR = "nvcr.io/nvidia/cloud-native/network-operator:v26.4.1"
PLUGIN = "nvcr.io/nvidia/mellanox/k8s-rdma-shared-dev-plugin:network-operator-v26.4.1"
DRIVER = "nvcr.io/nvidia/mellanox/doca-driver:doca3.4.1-26.04-1.1.0.0-1"
INIT = "nvcr.io/nvidia/mellanox/network-operator-init-container:network-operator-v26.4.1"
NFD = "nvcr.io/nvidia/mellanox/node-feature-discovery:network-operator-v26.4.1"


def chart_archive(tmp_path: Path) -> Path:
    files = {"Chart.yaml": CHART_YAML.encode(), "values.yaml": (UPSTREAM / "values.yaml").read_bytes()}
    path = tmp_path / CHART
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"network-operator/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def listed(found: list[dict[str, Any]]) -> dict[str, str]:
    return {i["image"]: i["for"] for i in found}


def test_the_operator_and_the_device_plugin_are_listed_and_nfd_is_the_gpu_operators(tmp_path: Path) -> None:
    spec = with_(lambda d: None)
    assert arts.network_operator_chart_artifact(spec).name == CHART
    assert listed(images.network_operator_images(spec, chart_archive(tmp_path))) == {
        OPERATOR: "Network Operator: operator",  # values.yaml's repository/image, tag the chart's appVersion
        PLUGIN: "Network Operator: NicClusterPolicy rdmaSharedDevicePlugin",
    }  # no NFD: with GPUs the GPU Operator's NFD serves both (nfd.enabled false)


def test_the_driver_container_brings_its_init_container(tmp_path: Path) -> None:
    spec = with_(lambda d: operator(d).update(ofed_driver=True), **doca())
    found = listed(images.network_operator_images(spec, chart_archive(tmp_path)))
    assert found[DRIVER] == "Network Operator: NicClusterPolicy ofedDriver"
    assert found[INIT] == "Network Operator: ofedDriver init container"
    assert set(found) == {OPERATOR, PLUGIN, DRIVER, INIT}


def test_without_gpus_the_network_operators_nfd_is_listed(tmp_path: Path) -> None:
    found = listed(images.network_operator_images(with_(cpu_only), chart_archive(tmp_path)))
    # the chart's values override NFD's image (node-feature-discovery.image in values.yaml)
    assert found[NFD].startswith("Network Operator: node-feature-discovery")
    assert set(found) == {OPERATOR, PLUGIN, NFD}


def test_image_list_reads_the_bundled_chart(tmp_path: Path) -> None:
    spec = with_(lambda d: None)
    (tmp_path / "artifacts").mkdir()
    chart_archive(tmp_path / "artifacts")
    found = listed(images.image_list(spec, tmp_path))
    assert {OPERATOR, PLUGIN} <= set(found)
