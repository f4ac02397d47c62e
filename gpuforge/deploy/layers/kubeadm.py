"""kubeadm: the cluster's shared keys, ``kubeadm init`` on the first control plane, join tokens, joins.

Three operations after the kubernetes layer (which records, per node, whether it is already in
the cluster), in this order on every host:

1. ``kubernetes-control-plane``: the shared PKI (gpuforge's cluster CA and the other keys every
   control plane shares, :mod:`gpuforge.deploy.k8s_pki`) on every control plane; on the first
   one the kubeadm config and, when it is not in a cluster yet, ``kubeadm init``.
2. ``kubernetes-join-token`` (first control plane): when any node of this run still has to join,
   a bootstrap token valid for ``TOKEN_TTL_MINUTES``, created from a 0600 manifest that is
   removed right after; nothing when every node is in. pyinfra runs an operation on every host
   before the next one, so the nodes' records of step 0 are complete here. A run whose
   selection (``--limit``, a rolling batch) leaves the first control plane out still has it, as a
   token host (:func:`token_hosts`) that runs this operation and no other.
3. ``kubernetes-join``: ``kubeadm join`` on a node that is not in the cluster, from a 0600
   JoinConfiguration (the token; the CA pinned by its hash) removed right after: each other
   control plane in an operation of its own, one after the other, then the workers together.

With a kube-vip endpoint every control plane runs kube-vip's static pod (:mod:`gpuforge.render.kube_vip`):
the first writes it before ``kubeadm init`` (reading ``super-admin.conf`` until init finished, then
``admin.conf``), the others right after their join (kubeadm's join preflight wants an empty manifest
directory); a control plane in the cluster gets it again when it differs from the spec's.

No certificate key (``kubeadm init --upload-certs``, ``join --certificate-key``): gpuforge writes the
shared keys on every control plane itself (step 1, and again after a reset), before its join,
so a joining control plane finds them on disk and kubeadm has nothing to download.

A node in the cluster gets no kubeadm command: re-runs never re-init or re-join. A kubeadm run
that was interrupted leaves its pending marker; the next run resets the node (``kubeadm reset``
empties the PKI directory, so the shared keys are written again) and runs it again.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuforge.deploy.converge import PENDING_DIR, Directory, Layer, LayerFacts, Step, StepKind
from gpuforge.deploy.k8s_pki import ca_cert_hash
from gpuforge.deploy.runstate import JOIN_TOKEN_LAYER, RunState
from gpuforge.render import kube_vip
from gpuforge.render import kubeadm as cfg
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.spec import Spec, k8s_upstream, resolve_nodes
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec.model import K8S_ROLES, Role
from gpuforge.spec.nodes import Node, nodes_with

#: A kubeadm init or join that started and has not finished (written before it, removed after).
KUBEADM_PENDING = f"{PENDING_DIR}/kubeadm.pending"
KUBECTL = f"kubectl --kubeconfig {k8s_upstream.ADMIN_CONF}"
PKI_DIRS = (Directory(k8s_upstream.PKI_DIR, "0755"), Directory(f"{k8s_upstream.PKI_DIR}/etcd", "0755"))


def pending_run(command: str, what: str, secret_file: str | None = None) -> str:
    """``command`` with the kubeadm pending marker written before it and removed after its success
    (``secret_file`` is removed whatever happens)."""
    mark = f"install -d -m 0700 {PENDING_DIR} && echo {what} > {KUBEADM_PENDING}"
    if secret_file is None:
        return f"{mark} && {command} && rm -f {KUBEADM_PENDING}"
    return f"{mark} && {{ {command}; rc=$?; rm -f {secret_file}; [ $rc -eq 0 ] && rm -f {KUBEADM_PENDING}; exit $rc; }}"


def shared_pki(pki: dict[str, bytes]) -> list[RenderedFile]:
    """The shared keys as files (``render.kubeadm.pki_files``: what ``gpuforge render`` shows, redacted)."""
    return cfg.pki_files(pki)


def reset_steps(facts: LayerFacts, pki: list[RenderedFile]) -> list[Step]:
    """An interrupted kubeadm init or join: reset the node, and write the shared keys again."""
    if facts.contents.get(KUBEADM_PENDING) is None:
        return []
    steps = [
        Step(StepKind.REPAIR, "kubeadm reset (an earlier kubeadm init or join was interrupted)", "kubeadm reset -f")
    ]
    steps += [Step(StepKind.UPLOAD, f"write {f.path} again (kubeadm reset removed it)", upload=f) for f in pki]
    return steps


def is_member(facts: LayerFacts) -> bool:
    return facts.contents.get(k8s_upstream.KUBELET_CONFIG) is not None and facts.contents.get(KUBEADM_PENDING) is None


def kube_vip_file(s: Spec, kubeconfig: str = day2.KUBE_VIP_KUBECONFIG) -> RenderedFile:
    """kube-vip's static pod manifest (0600, as kubeadm writes its own)."""
    return RenderedFile(day2.KUBE_VIP_MANIFEST, kube_vip.manifest(s, kubeconfig), mode="0600")


def kube_vip_steps(s: Spec, n: Node, facts: LayerFacts) -> list[Step]:
    """A control plane in the cluster whose kube-vip manifest is not the spec's: written again (the
    kubelet restarts the pod). Nodes not in yet get it with their init or join (kube-vip-static)."""
    if not kube_vip.runs_on(s, n) or not is_member(facts):
        return []
    want = kube_vip_file(s)
    if facts.contents.get(want.path) == want.data.decode():
        return []
    return [Step(StepKind.UPLOAD, f"write {want.path} (kube-vip {kube_vip.image(s)}, VIP {cfg.endpoint_address(s)})",
                 upload=want)]  # fmt: skip


def init_steps(s: Spec, facts: LayerFacts, keys: list[RenderedFile]) -> list[Step]:
    """``kubeadm init`` on the first control plane; with kube-vip its manifest around it: reading
    super-admin.conf during init, admin.conf after (kube-vip-static)."""
    init = f"kubeadm init --config {cfg.KUBEADM_INIT_CONFIG} --skip-token-print"
    steps = [*reset_steps(facts, keys)]
    vip = cfg.kube_vip(s) is not None
    during = kube_vip.init_kubeconfig(s)
    if vip:
        steps.append(Step(StepKind.UPLOAD, f"write {day2.KUBE_VIP_MANIFEST} (kube-vip reads {during} during init)",
                          upload=kube_vip_file(s, during)))  # fmt: skip
    steps.append(Step(StepKind.INSTALL, f"kubeadm init of cluster {s.cluster.name} (v{s.versions.kubernetes})",
                      pending_run(init, "init")))  # fmt: skip
    if vip and during != day2.KUBE_VIP_KUBECONFIG:
        steps.append(Step(StepKind.UPLOAD, f"write {day2.KUBE_VIP_MANIFEST} (kube-vip reads "
                          f"{day2.KUBE_VIP_KUBECONFIG} from now on)", upload=kube_vip_file(s)))  # fmt: skip
    return steps


def control_plane_layer(s: Spec, n: Node, pki: dict[str, bytes]) -> Layer:
    """Shared keys on every control plane; the kubeadm config and ``kubeadm init`` on the first;
    kube-vip's manifest kept as the spec says on control planes in the cluster."""
    if s.kubernetes is None or not n.has(Role.K8S_CONTROL_PLANE):
        return Layer.empty("kubernetes-control-plane")
    first = cfg.first_control_plane(s)
    keys = shared_pki(pki)
    files = cfg.kubeadm_files(s, n, Secrets.redacted().with_k8s_pki(pki))
    read = (
        k8s_upstream.KUBELET_CONFIG,
        KUBEADM_PENDING,
        *((day2.KUBE_VIP_MANIFEST,) if kube_vip.runs_on(s, n) else ()),
    )
    if first is None or first.name != n.name:
        if not kube_vip.runs_on(s, n):
            return Layer("kubernetes-control-plane", directories=PKI_DIRS, files=files)
        return Layer("kubernetes-control-plane", directories=PKI_DIRS, files=files, read_paths=read,
                     after=lambda facts, changed: kube_vip_steps(s, n, facts))  # fmt: skip

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if is_member(facts):
            return kube_vip_steps(s, n, facts)
        return init_steps(s, facts, keys)

    return Layer(
        "kubernetes-control-plane",
        directories=PKI_DIRS,
        files=files,
        read_paths=read,
        after=after,
    )


def token_hosts(s: Spec, names: list[str] | None, layers: tuple[str, ...] | None) -> frozenset[str]:
    """The hosts a run over ``names`` (None: every node) walking ``layers`` (None: all) needs for
    the join token only: the first control plane, when ``names`` leaves it out and holds another
    Kubernetes node (whether that one joins is known from its facts, during the run)."""
    first = cfg.first_control_plane(s)
    if s.kubernetes is None or first is None or names is None or first.name in names:
        return frozenset()
    if layers is not None and "kubernetes" not in layers:
        return frozenset()
    if not any(n.name in names and n.roles & K8S_ROLES for n in resolve_nodes(s)):
        return frozenset()
    return frozenset({first.name})


def join_token_layer(s: Spec, n: Node, run: RunState) -> Layer:
    """On the first control plane (in the run's selection or a token host): a short-lived bootstrap
    token when some node of the run still joins. The token is only in the 0600 manifest."""
    first = cfg.first_control_plane(s)
    if s.kubernetes is None or first is None or first.name != n.name:
        return Layer.empty(JOIN_TOKEN_LAYER)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        joining = [h for h in run.k8s_joining() if h != first.name]
        if not joining:
            return []
        manifest = RenderedFile(cfg.JOIN_TOKEN_MANIFEST, cfg.bootstrap_token_secret(run.join_token()), "0600",
                                secret=True)  # fmt: skip
        # create, not apply: apply would keep the token in a last-applied-configuration annotation
        apply = f"{{ {KUBECTL} create -f {manifest.path}; rc=$?; rm -f {manifest.path}; exit $rc; }}"
        ttl = k8s_upstream.TOKEN_TTL_MINUTES
        return [
            Step(StepKind.UPLOAD, f"write a {ttl}-minute bootstrap token for {', '.join(joining)} (secret)",
                 upload=manifest),
            Step(StepKind.INSTALL, "create the bootstrap token (the manifest is removed)", apply),
        ]  # fmt: skip

    return Layer(JOIN_TOKEN_LAYER, after=after)


def join_layer(s: Spec, n: Node, run: RunState, pki: dict[str, bytes]) -> Layer:
    """``kubeadm join`` of a worker or another control plane that is not in the cluster (a control
    plane with kube-vip gets its manifest right after its join: kube-vip-static)."""
    first = cfg.first_control_plane(s)
    if s.kubernetes is None or not n.roles & K8S_ROLES or first is None or first.name == n.name:
        return Layer.empty("kubernetes-join")
    keys = shared_pki(pki) if n.has(Role.K8S_CONTROL_PLANE) else []
    ca_hash = ca_cert_hash(pki["ca.crt"])

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if is_member(facts):
            return []
        join_file = RenderedFile(
            cfg.KUBEADM_JOIN_CONFIG, cfg.join_config(s, n, run.join_token(), ca_hash), "0600", secret=True
        )
        join = f"kubeadm join --config {join_file.path}"
        role = "control plane" if n.has(Role.K8S_CONTROL_PLANE) else "worker"
        steps = [
            *reset_steps(facts, keys),
            Step(StepKind.UPLOAD, "write the join configuration (secret: token; CA pinned by its hash)",
                 upload=join_file),
            Step(StepKind.INSTALL, f"kubeadm join as a {role} via {cfg.api_endpoint(s)}",
                 pending_run(join, "join", join_file.path)),
        ]  # fmt: skip
        if kube_vip.runs_on(s, n):
            steps.append(Step(StepKind.UPLOAD, f"write {day2.KUBE_VIP_MANIFEST} (kube-vip, after the join)",
                              upload=kube_vip_file(s)))  # fmt: skip
        return steps

    return Layer("kubernetes-join", read_paths=(k8s_upstream.KUBELET_CONFIG, KUBEADM_PENDING), after=after)


Build = Callable[[Spec, Node, RunState, dict[str, bytes]], Layer]


def _only_on(name: str, title: str) -> Build:
    """``join_layer`` on the node ``name``, nothing elsewhere."""
    return lambda s, n, run, pki: join_layer(s, n, run, pki) if n.name == name else Layer.empty(title)


def operations(s: Spec) -> list[tuple[str, Build]]:
    """The kubeadm operations in order. Control planes join one at a time, each in its own operation
    (pyinfra runs an operation on every host before the next, so one control plane's etcd member has
    joined before the next starts: concurrent etcd member joins are what upstream reports as flaky);
    the workers join together in the last one."""
    first = cfg.first_control_plane(s)
    ops: list[tuple[str, Build]] = [
        ("kubernetes: shared keys and kubeadm init", lambda s, n, run, pki: control_plane_layer(s, n, pki)),
        ("kubernetes: join token", lambda s, n, run, pki: join_token_layer(s, n, run)),
    ]
    for plane in nodes_with(s, Role.K8S_CONTROL_PLANE):
        if first is not None and plane.name != first.name:
            title = f"kubernetes: kubeadm join of control plane {plane.name}"
            ops.append((title, _only_on(plane.name, title)))
    workers: Build = lambda s, n, run, pki: (  # noqa: E731
        join_layer(s, n, run, pki) if not n.has(Role.K8S_CONTROL_PLANE) else Layer.empty("kubernetes-join")
    )
    ops.append(("kubernetes: kubeadm join of the workers", workers))
    return ops
