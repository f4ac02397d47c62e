"""The cluster's admin kubeconfig, copied from the first control plane to the control host.

It is a credential: it never passes through a file other users could read, not even for a
moment (created 0600 in a 0700 directory, then renamed into place), and is never printed.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuforge.deploy.secrets import state_root
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.applied_record import write_private
from gpuforge.spec import Role, Spec, k8s_upstream, nodes_with
from gpuforge.spec.cluster import Cluster


class KubeconfigError(RuntimeError):
    """The kubeconfig could not be fetched (the message says why; it never holds the file)."""


def default_path(spec: Spec) -> Path:
    """``<state dir>/<cluster>/admin.conf`` on the control host."""
    return state_root() / spec.cluster.name / "admin.conf"


def fetch(cluster: Cluster, dest: Path | None = None) -> Path:
    """Copy ``/etc/kubernetes/admin.conf`` of the first control plane to ``dest`` (default
    :func:`default_path`); returns where it is."""
    spec = cluster.spec
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    if spec.kubernetes is None or not planes:
        raise KubeconfigError("the spec has no Kubernetes control plane")
    first = planes[0].name
    cp = remote.run(cluster, first, f"cat {k8s_upstream.ADMIN_CONF}", timeout=60)
    if cp.returncode != 0:
        why = cp.stderr.strip().splitlines()[-1:] or [f"exit {cp.returncode}"]
        raise KubeconfigError(f"{first}: cannot read {k8s_upstream.ADMIN_CONF} ({why[0]}): has kubeadm init run?")
    try:
        doc = yaml.safe_load(cp.stdout)
    except yaml.YAMLError:
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != "Config":
        raise KubeconfigError(f"{first}: {k8s_upstream.ADMIN_CONF} is not a kubeconfig")
    target = dest or default_path(spec)
    write_private(target, cp.stdout)
    return target
