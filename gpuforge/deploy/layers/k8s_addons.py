"""The cluster's add-ons, from the first control plane once kubeadm is done: pod network, helm, the
NVIDIA GPU Operator (and the wait for its driver upgrade), the KubeRay operator and Kubeflow Trainer
(:mod:`gpuforge.deploy.layers.k8s_charts`), the batch-queue controller, the tenants' queues and the
nodes' labels.

Each add-on is applied when what it was applied from changed: a stamp file per add-on holds a
digest of its inputs (versions, manifest and values checksums, the pod CIDR), written only after
the add-on's command succeeded. A re-run with the same spec runs none of them; an interrupted
run leaves the old stamp, so the next run applies again (every command here is idempotent:
``kubectl apply``, ``helm upgrade --install``, ``kubectl label --overwrite``). Upstream facts
(URLs, commands) are :mod:`gpuforge.spec.k8s_upstream`.

An add-on installed as a helm release (the GPU Operator, KubeRay, Trainer) is also compared with the live release,
read in the same round trip as the stamps (:mod:`gpuforge.deploy.layers.helm_release`): its stamp
records the release revision helm reported right after the upgrade, and helm runs again when the
release is missing, not ``deployed``, or at another revision than the stamp's (someone uninstalled,
rolled back or upgraded it by hand). A release helm cannot read (API server down, RBAC) is reported
with a warning and not compared; helm runs only if the stamp's digest differs.
"""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import Layer, LayerFacts, Step, StepKind
from gpuforge.deploy.layers.helm_release import HELM, KUBECONFIG, REVISION_MARK, read_release, release_drift
from gpuforge.deploy.layers.k8s_addon import STAMP_DIR as STAMP_DIR
from gpuforge.deploy.layers.k8s_addon import AddOn as AddOn
from gpuforge.deploy.layers.k8s_addon import fetch_artifact as _fetch
from gpuforge.deploy.layers.k8s_addon import sha16 as _sha
from gpuforge.deploy.layers.k8s_charts import chart_addons
from gpuforge.deploy.layers.k8s_charts import gpu_operator_addon as gpu_operator_addon
from gpuforge.deploy.layers.k8s_network_operator import network_operator_addons
from gpuforge.deploy.layers.nvidia.common import unavailable_step
from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import kubeadm as cfg
from gpuforge.render import kubernetes as k8s
from gpuforge.render.escape import sed_replacement, shell_word
from gpuforge.render.files import RenderedFile
from gpuforge.spec import Spec, k8s_upstream
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec import k8s_frameworks as fw
from gpuforge.spec.model import K8S_ROLES, Role
from gpuforge.spec.nodes import Node, resolve_nodes
from gpuforge.spec.types import k8s_name

MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def flannel_network_sed(pod_cidr: str) -> str:
    """The sed script that sets flannel's ``"Network"`` to ``pod_cidr`` (a literal replacement)."""
    default = k8s_upstream.FLANNEL_DEFAULT_NETWORK
    return f's#"Network": "{default}"#"Network": "{sed_replacement(pod_cidr)}"#'


def flannel_iface_command(iface: str, path: str) -> str:
    """Adds ``--iface=<iface>`` to flanneld's arguments in the manifest (after ``--kube-subnet-mgr``, at
    its indentation), and fails when the manifest has no such line to add it after."""
    arg = f"- --iface={iface}"
    sed = f"s#^\\( *\\)- --kube-subnet-mgr$#&\\n\\1{arg}#"
    refused = shlex.quote(f"gpuforge: no '- --kube-subnet-mgr' argument in {path}: cannot pin flannel to {iface}")
    check = f"grep -q -- {shlex.quote(arg + '$')} {path}"
    return f"sed -i {shell_word(sed)} {path} && {{ {check} || {{ echo {refused} >&2; false; }}; }}"


def cni_addon(s: Spec) -> AddOn:
    k = k8s.kubernetes_section(s)
    plugin = k.cni.plugin
    version = arts.cni_version(s)
    a = arts.cni_artifact(s)
    fetch, pushed = _fetch(a)
    path = shlex.quote(a.node_path)
    steps = [fetch] if fetch else []
    if plugin == "flannel" and k.pod_cidr != k8s_upstream.FLANNEL_DEFAULT_NETWORK:  # flannel README: match the pod CIDR
        steps.append(f"sed -i {shell_word(flannel_network_sed(k.pod_cidr))} {path}")
    if plugin == "flannel" and k.node_interface is not None:  # k8s_day2 'flannel-iface'
        steps.append(flannel_iface_command(k.node_interface, path))
    steps.append(f"{KUBECONFIG} kubectl apply -f {path}")
    digest = f"{plugin} {version} {k.pod_cidr} {a.sha256 or '-'}" + (
        f" iface:{k.node_interface}" if k.node_interface else ""
    )
    command = " && ".join(steps) if fetch else None
    return AddOn("cni", f"pod network: {plugin} {version} (pod CIDR {k.pod_cidr})", digest, command, a.reason, pushed)


def helm_addon(s: Spec) -> AddOn:
    a = arts.helm_artifact(s)
    fetch, pushed = _fetch(a)
    command = None
    if fetch:
        path = shlex.quote(a.node_path)
        inner = f"linux-{arts.helm_go_arch(s)}/helm"
        command = (
            f'{fetch} && d=$(mktemp -d) && tar -xzf {path} -C "$d" {inner} && '
            f'install -m 0755 "$d/{inner}" {HELM} && rm -rf "$d"'
        )
    return AddOn("helm", f"helm {s.versions.helm} in {HELM}", s.versions.helm, command, a.reason, pushed)


def queue_controller_addon(s: Spec) -> AddOn:
    bq = k8s.kubernetes_section(s).batch_queue
    a = arts.queue_controller_artifact(s)
    fetch, pushed = _fetch(a)
    ns, deployment = k8s_upstream.QUEUE_CONTROLLER_DEPLOYMENTS[bq.kind]
    command = None
    if fetch:
        command = (
            f"{fetch} && {KUBECONFIG} kubectl apply --server-side -f {shlex.quote(a.node_path)} && "
            f"{KUBECONFIG} kubectl wait deploy/{deployment} -n {ns} --for=condition=available --timeout=5m"
        )
    digest = f"{bq.kind} {bq.version} {a.sha256 or '-'}"
    return AddOn("queue-controller", f"{bq.kind} {bq.version}", digest, command, a.reason, pushed)


def queues_addon(s: Spec, manifests: RenderedFile, controller: AddOn) -> AddOn:
    """The rendered queues (and, for Volcano, its scheduler configuration). Applied again whenever
    the controller is: a new release's manifests bring their own default scheduler ConfigMap."""
    command = f"{KUBECONFIG} kubectl apply --server-side -f {manifests.path}"
    tenants = len(k8s.kubernetes_section(s).batch_queue.tenants)
    digest = f"{manifests.sha256[:16]} controller:{_sha(controller.digest)}"
    return AddOn("queues", f"the tenants' queues ({tenants}, {manifests.path})", digest, command)


def kueue_config_addon(s: Spec, controller: AddOn) -> AddOn | None:
    """Kueue's own configuration (``manageJobsWithoutQueueName``; ``render.kubernetes.kueue_config``),
    applied after its controller and the controller restarted to read it (k8s_day2 'kueue-config');
    unavailable when the spec turns the setting on for a release gpuforge does not know."""
    file = k8s.kueue_config_file(s)
    ns, deployment = day2.KUEUE_NAMESPACE, day2.KUEUE_DEPLOYMENT
    summary = f"Kueue configuration (manageJobsWithoutQueueName: {str(k8s.manage_jobs_without_queue_name(s)).lower()})"
    if file is None:
        if not k8s.manage_jobs_without_queue_name(s):
            return None
        version = k8s.kubernetes_section(s).batch_queue.version
        known = ", ".join(day2.KUEUE_DEFAULT_CONFIG)
        why = (
            f"gpuforge knows the configuration of Kueue {known}, not {version}: pin one, or set "
            "manage_jobs_without_queue_name: false"
        )
        return AddOn("queue-config", summary, "-", None, why)
    command = (
        f"{KUBECONFIG} kubectl apply --server-side --force-conflicts -f {file.path} && "
        f"{KUBECONFIG} kubectl rollout restart deployment/{deployment} -n {ns} && "
        f"{KUBECONFIG} kubectl rollout status deployment/{deployment} -n {ns} --timeout=5m"
    )
    return AddOn("queue-config", summary, f"{file.sha256[:16]} controller:{_sha(controller.digest)}", command)


def node_labels(s: Spec) -> dict[str, dict[str, str]]:
    """Labels gpuforge sets on Kubernetes nodes: with Kueue tenants, each k8s worker's group (its
    ResourceFlavor's ``nodeLabels``, k8s_frameworks 'kueue-flavors'); the MIG layout of each node that
    has one."""
    bq = k8s.kubernetes_section(s).batch_queue
    flavored = bq.kind == "kueue" and bool(bq.tenants)
    out: dict[str, dict[str, str]] = {}
    for n in resolve_nodes(s):
        if not n.roles & K8S_ROLES:
            continue
        labels = {fw.NODE_GROUP_LABEL: k8s_name(n.group)} if flavored and n.has(Role.K8S_WORKER) else {}
        labels.update({MIG_CONFIG_LABEL: n.mig_config} if n.mig_config else {})
        if labels:
            out[n.name] = labels
    return out


def labels_addon(s: Spec) -> AddOn:
    labels = node_labels(s)
    parts = [
        f"{KUBECONFIG} kubectl label node {shlex.quote(name)} --overwrite "
        + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(kv.items()))
        for name, kv in sorted(labels.items())
    ]
    digest = _sha(repr(sorted((n, sorted(kv.items())) for n, kv in labels.items())))
    keys = ", ".join(sorted({k for kv in labels.values() for k in kv}))
    return AddOn("node-labels", f"labels on {len(labels)} node(s) ({keys})", digest, " && ".join(parts))


def addons(s: Spec) -> list[AddOn]:
    """The add-ons of the spec's cluster, in the order they are applied: the frameworks before the queue
    controller, so that Kueue's integrations find their CRDs when it starts."""
    out = [cni_addon(s)]
    charts = chart_addons(s)
    # the Network Operator right after the GPU Operator: its NFD, and before the driver wait (MOFED first)
    at = next((i + 1 for i, a in enumerate(charts) if a.name == "gpu-operator"), 0)
    charts[at:at] = network_operator_addons(s)
    if charts:
        out += [helm_addon(s), *charts]
    queues = k8s.batch_queue_file(s)
    if queues is not None:
        controller = queue_controller_addon(s)
        config = kueue_config_addon(s, controller) if k8s.kubernetes_section(s).batch_queue.kind == "kueue" else None
        out += [controller, *([config] if config else []), queues_addon(s, queues, controller)]
    if node_labels(s):
        out.append(labels_addon(s))
    return out


def _stamped(a: AddOn, facts: LayerFacts) -> bool:
    """The stamp holds the add-on's current digest (and, for a helm release, a revision)."""
    stamp = (facts.contents.get(a.stamp) or "").strip()
    if a.release is None:
        return stamp == a.digest
    digest, mark, _ = stamp.rpartition(REVISION_MARK)
    return bool(mark) and digest == a.digest


def _release_check(a: AddOn, facts: LayerFacts) -> tuple[str | None, Step | None]:
    """For an add-on whose stamp is current: why its live release needs helm again (None: it
    does not), or a warning when the release could not be read (so it was not compared)."""
    if a.release is None:
        return None, None
    read = read_release(facts.contents.get(a.release.key))
    if read.error is not None:
        r = a.release
        return None, Step(
            StepKind.WARNING,
            f"{a.summary}: release {r.name} in namespace {r.namespace} could not be read and was not "
            f"compared with the stamp: {read.error}",
        )
    return release_drift(a.release, facts.contents.get(a.stamp), read), None


def addon_steps(items: list[AddOn], facts: LayerFacts) -> list[Step]:
    """The add-ons whose stamp differs or whose live release drifted from it; nothing after one
    that has no source (later ones may need it). A current add-on whose release cannot be read
    is a warning, not a run."""
    steps: list[Step] = []
    for a in items:
        why = None
        if _stamped(a, facts):
            why, warning = _release_check(a, facts)
            if warning is not None:
                steps.append(warning)
            if why is None:
                continue
        if a.command is None:
            steps.append(unavailable_step(a.summary, a.reason))
            break
        steps += [Step(StepKind.UPLOAD, f"write {f.path} (bundle)", upload=f) for f in a.pushed]
        summary = f"apply {a.summary}" + (f": {why}" if why else "")
        steps.append(Step(StepKind.INSTALL, summary, f"{a.command} && {a.stamp_command()}"))
    return steps


def addons_layer(s: Spec, n: Node) -> Layer:
    """On the first control plane: the add-ons that are not applied as the spec says."""
    first = cfg.first_control_plane(s)
    if s.kubernetes is None or first is None or first.name != n.name:
        return Layer.empty("kubernetes-addons")
    items = addons(s)
    releases = tuple(a.release.read for a in items if a.release is not None)
    return Layer(
        "kubernetes-addons",
        read_paths=(*(a.stamp for a in items), *releases),
        after=lambda facts, changed: addon_steps(items, facts),
    )
