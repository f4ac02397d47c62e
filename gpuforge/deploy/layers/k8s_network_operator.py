"""The NVIDIA Network Operator as two add-ons of the first control plane (after the GPU Operator, whose
NFD it shares): the pinned chart, then its NicClusterPolicy and the bounded wait for it.
Facts: :mod:`gpuforge.spec.network_operator`; files: :mod:`gpuforge.render.k8s_network_operator`.

Invariants:

* The chart archive is used only once its sha256 is the known one: NGC publishes none gpuforge can
  cite, so it is the spec's pin (``sources.artifact_sha256``), else the add-on is reported unavailable
  with the pin to write (as KubeRay's later releases and the GPU Operator's chart are).
* The chart's own pre-install/pre-upgrade hook applies its CRDs (``upgradeCRDs: true``), so helm
  needs no CRD step before it; the namespace is created and labelled for privileged pods first
  (NVIDIA's install guide), then ``helm upgrade --install --wait`` (bounded).
* The NicClusterPolicy is applied server-side after the chart (its CRD exists by then), then read
  every ``POLL_S`` seconds until its ``status.state`` is ``ready``, for at most the spec's
  ``wait_minutes``; the last state and reason are reported when it is not. Its stamp (digest of the
  CR and the chart add-on's digest) is written only after that, so a changed chart applies the CR again.
"""

from __future__ import annotations

import shlex

from gpuforge.deploy.layers.helm_release import KUBECONFIG, HelmRelease
from gpuforge.deploy.layers.k8s_addon import AddOn, sha16
from gpuforge.deploy.layers.k8s_charts import chart_fetch, helm_install
from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import k8s_network_operator as render
from gpuforge.render.k8s_common import kubernetes_section
from gpuforge.render.nvidia import dump_yaml, dump_yaml_all
from gpuforge.spec import Spec
from gpuforge.spec import network_operator as no
from gpuforge.spec.network_operator_rules import network_operator_on

#: Seconds between two reads of the NicClusterPolicy's state.
POLL_S = 10


def namespace_command(namespace: str) -> str:
    """Creates the namespace when it is missing and labels it for privileged pods (network-operator-install)."""
    k, ns = f"{KUBECONFIG} kubectl", shlex.quote(namespace)
    return (
        f"{{ {k} get namespace {ns} >/dev/null 2>&1 || {k} create namespace {ns}; }} && "
        f"{k} label --overwrite namespace {ns} {shlex.quote(no.POD_SECURITY_LABEL)}"
    )


def network_operator_addon(s: Spec) -> AddOn:
    """The namespace, then ``helm upgrade --install`` of the pinned chart with the rendered values."""
    op = kubernetes_section(s).network_operator
    values = render.NETWORK_OPERATOR_VALUES
    summary = f"NVIDIA Network Operator {op.version} (helm upgrade --install, values {values})"
    digest = f"{op.version} values:{sha16(dump_yaml(render.network_operator_values(s)))}"
    release = HelmRelease(no.NETWORK_OPERATOR_RELEASE, op.namespace)
    fetch, pushed, reason, path = chart_fetch(
        s, no.chart_file(op.version), no.NETWORK_OPERATOR_CHART, no.NETWORK_OPERATOR_REPO,
        arts.network_operator_chart_artifact(s),
    )  # fmt: skip
    if fetch is None:
        return AddOn("network-operator", summary, digest, None, reason, release=release)
    argv = ["upgrade", "--install", no.NETWORK_OPERATOR_RELEASE, path, "--namespace", op.namespace,
            "--create-namespace", "--version", op.version, "-f", values]  # fmt: skip
    command = f"{fetch} && {namespace_command(op.namespace)} && {helm_install(argv)}"
    return AddOn("network-operator", summary, digest, command, pushed=pushed, release=release)


def policy_wait_script(minutes: int) -> str:
    """The bounded wait for the NicClusterPolicy's ``status.state`` to be ``ready`` (nicclusterpolicy-crd):
    the first read comes one interval after the apply (the operator's reconcile), the last state and
    reason are reported when the time is up."""
    tries = max(1, minutes * 60 // POLL_S)
    get = f"{KUBECONFIG} kubectl get {no.NIC_POLICY_RESOURCE} {no.NIC_POLICY_NAME}"
    state = f"{get} -o jsonpath='{{.status.state}}'"
    reason = f"{get} -o jsonpath='{{.status.reason}}'"
    return (
        f"( i=0; state=''; while [ $i -lt {tries} ]; do sleep {POLL_S}; "
        f"state=$({state} 2>/dev/null) || state=''; "
        f'if [ "$state" = {no.STATE_READY} ]; then echo "gpuforge: {no.NIC_POLICY_NAME} is {no.STATE_READY}"; '
        "exit 0; fi; i=$((i + 1)); done; "
        f"why=$({reason} 2>/dev/null) || why=''; "
        f'echo "gpuforge: {no.NIC_POLICY_NAME} is not {no.STATE_READY} after {minutes} minutes (state: '
        '${state:-none}${why:+, reason: $why})" >&2; exit 1 )'
    )


def nic_policy_addon(s: Spec, operator: AddOn) -> AddOn:
    """Server-side apply of the rendered NicClusterPolicy, then the bounded wait until it is ready."""
    op = kubernetes_section(s).network_operator
    policy = dump_yaml_all([render.nic_cluster_policy(s)])
    summary = f"NicClusterPolicy {no.NIC_POLICY_NAME} (rdma/{op.resource_name}; {render.NIC_CLUSTER_POLICY})"
    digest = f"{sha16(policy)} operator:{sha16(operator.digest)}"
    apply = f"{KUBECONFIG} kubectl apply --server-side --force-conflicts -f {render.NIC_CLUSTER_POLICY}"
    return AddOn("nic-cluster-policy", summary, digest, f"{apply} && {policy_wait_script(op.wait_minutes)}")


def network_operator_addons(s: Spec) -> list[AddOn]:
    """The chart and its NicClusterPolicy, in order (none when the operator is off)."""
    if not network_operator_on(s):
        return []
    operator = network_operator_addon(s)
    return [operator, nic_policy_addon(s, operator)]
