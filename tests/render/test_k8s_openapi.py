"""Every core-API object gpuforge renders for Kubernetes validates against the OpenAPI schema of the
spec's minor version (``kubernetes-validate``, strict: no unknown field); the custom resources
are checked against their CRDs in tests/render/test_kubernetes.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuforge.render import kubeadm as cfg
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import load_spec
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.conftest import REPO

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
CORE_GROUPS = ("v1", "apps/v1", "rbac.authorization.k8s.io/v1", "batch/v1", "scheduling.k8s.io/v1")


def core_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("apiVersion") in CORE_GROUPS]


def minor(spec: Any) -> str:
    return ".".join(spec.versions.kubernetes.split(".")[:2])


@pytest.mark.parametrize("kind", ["kueue", "volcano"])
def test_queue_manifests_core_objects_validate(kind: str) -> None:
    spec = load_spec(K8S)
    if kind == "volcano":
        data = yaml.safe_load(K8S.read_text())
        data["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1")
        spec = parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=K8S.parent)
    queue_file = k8s.batch_queue_file(spec)
    assert queue_file is not None
    objects = core_objects(list(yaml.safe_load_all(queue_file.data)))
    assert objects, "no core objects in the queue manifests"
    for obj in objects:
        assert kubernetes_validate.validate(obj, minor(spec), strict=True) == minor(spec)


def test_bootstrap_token_secret_validates() -> None:
    spec = load_spec(K8S)
    doc = cfg.bootstrap_token_document("abcdef.0123456789abcdef", datetime.now(UTC))
    assert kubernetes_validate.validate(doc, minor(spec), strict=True) == minor(spec)


def test_the_check_can_fail() -> None:
    doc = cfg.bootstrap_token_document("abcdef.0123456789abcdef", datetime.now(UTC))
    doc["stringdata"] = doc.pop("stringData")  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.31", strict=True)
