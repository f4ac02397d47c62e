"""``scheduler.k8s_certificates``: days left of kubeadm's certificates on every control plane.

Each control plane answers ``kubeadm certs check-expiration -o json`` (``gpuforge.spec.k8s_day2``
'kubeadm-certs-output': a CertificateExpirationInfo, its certificates with ``expirationDate`` in
RFC 3339). A control plane whose soonest certificate kubeadm manages has fewer days left than
``kubernetes.certificates.warn_days`` fails: the renewal timer should have renewed it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuforge.spec import Role, Spec
from gpuforge.spec.bounded_read import bounded_json
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.validator.cluster import GATHERERS, ClusterData, Gatherer, NodeRun, cluster_check
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP, WARNING, Outcome

CERTS = "scheduler.k8s_certificates"
QUERY = 'timeout 60 kubeadm certs check-expiration -o json 2>&1; echo "__rc=$?"'


def parse_expiration(text: str, now: datetime) -> list[tuple[str, int]]:
    """(certificate, whole days left at ``now``) of each certificate kubeadm manages (not externally
    managed, not missing), soonest first; :class:`ValueError` for output that is not the JSON document."""
    doc = bounded_json(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("certificates"), list):
        raise ValueError("no 'certificates' list")
    if not all(isinstance(c, dict) for c in doc["certificates"]):
        raise ValueError("a certificate that is not an object")
    out = []
    for cert in doc["certificates"]:
        if cert.get("externallyManaged") or cert.get("missing"):
            continue
        expires = datetime.fromisoformat(str(cert["expirationDate"]).replace("Z", "+00:00"))
        out.append((str(cert["name"]), (expires - now).days))
    return sorted(out, key=lambda c: c[1])


def read_certs(data: ClusterData, run: NodeRun) -> dict[str, Any]:
    """Each control plane's answer: {node: (rc, output without the rc line)}."""
    out: dict[str, Any] = {}
    for plane in nodes_with(data.spec, Role.K8S_CONTROL_PLANE):
        rc, text, err = run(plane, QUERY)
        body = "\n".join(line for line in text.splitlines() if not line.startswith("__rc="))
        rcs = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("__rc=")]
        out[plane.name] = (int(rcs[-1]) if rcs and rcs[-1].isdigit() and len(rcs[-1]) < 4 else rc, body or err)
    return out


GATHERERS.append(Gatherer("k8s_certs", frozenset({CERTS}), read_certs))


def gate_control_plane(spec: Spec, node: Node) -> str | None:
    if spec.kubernetes is None:
        return "not a Kubernetes cluster"
    return None if node.has(Role.K8S_CONTROL_PLANE) else "not a control plane"


def judge(text: str, warn_days: int, now: datetime) -> Outcome:
    """The row of one control plane from its check-expiration output."""
    try:
        certs = parse_expiration(text, now)
    except (ValueError, KeyError, TypeError) as e:
        return BLOCKED, f"kubeadm certs check-expiration printed no expiration list ({e}): {text.strip()[-200:]}"
    if not certs:
        return SKIP, "kubeadm manages no certificate here (all externally managed or missing)"
    name, days = certs[0]
    if days < warn_days:
        return FAIL, f"{name} expires in {days} days (fewer than {warn_days}): is the renewal timer running?"
    return PASS, f"soonest: {name} in {days} days"


@cluster_check(CERTS, "scheduler", WARNING, "kubeadm's certificates have enough days left", gate=gate_control_plane)
def certificates(data: ClusterData, node: Node) -> Outcome:
    read = data.gathered.get("k8s_certs", {}).get(node.name)
    k = data.spec.kubernetes
    if read is None or k is None:
        return BLOCKED, "not read"
    rc, text = read
    if rc != 0:
        return BLOCKED, f"kubeadm certs check-expiration failed (exit {rc}): {text.strip()[-200:]}"
    return judge(text, k.certificates.warn_days, datetime.now(UTC))
