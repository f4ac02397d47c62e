"""A Kubernetes spec takes every default: ``kubernetes: {}`` and no section at all are accepted (the
review found ``kubernetes: {}`` refused by its own defaults: the operator's dcgm-exporter against
``dcgm.enabled``), and the defaults never run two DCGM host engines on one GPU."""

from __future__ import annotations

import pytest

from gpuforge.render.kubernetes import gpu_operator_values
from gpuforge.render.nvidia import host_dcgm_exporter
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.k8s_model import operator_dcgm_exporter

BASE = """
cluster: {name: k, scheduler: kubernetes}
versions: {driver: {version: 580.126.20, source: nvidia}}
node_groups:
  - {name: cp, hosts: cp1, address_start: 192.0.2.10, roles: [k8s-control-plane]}
  - {name: w, hosts: w1, address_start: 192.0.2.20, roles: [k8s-worker],
     hardware: {gpu: {model: H100-80GB, count: 8}}}
"""


@pytest.mark.parametrize("section", ["", "kubernetes: {}\n"], ids=["absent", "empty"])
def test_every_default_is_accepted_and_dcgm_runs_once(section: str) -> None:
    spec = parse_spec(BASE + section)
    assert spec.kubernetes is not None
    assert spec.dcgm.enabled and not operator_dcgm_exporter(spec.kubernetes.gpu_operator, spec.dcgm.enabled)
    assert host_dcgm_exporter(spec)  # the host's exporter, against the host's engine
    assert gpu_operator_values(spec)["dcgmExporter"]["enabled"] is False


def test_without_host_dcgm_the_operator_exports() -> None:
    spec = parse_spec(BASE + "dcgm: {enabled: false}\n")
    assert spec.kubernetes is not None and operator_dcgm_exporter(spec.kubernetes.gpu_operator, False)
    assert gpu_operator_values(spec)["dcgmExporter"]["enabled"] is True


def test_asking_for_both_host_engines_is_still_refused() -> None:
    with pytest.raises(SpecError, match=r"kubernetes\.gpu_operator\.dcgm_exporter: the GPU Operator.s dcgm-exporter"):
        parse_spec(BASE + "kubernetes: {gpu_operator: {dcgm_exporter: true}}\n")
