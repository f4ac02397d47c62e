"""``validate``: read every node in parallel over SSH, then judge the cluster-wide checks.

One round trip per node: the node program (``nodelocal`` with the probes it uses, built into
one file by :mod:`gpuforge.render.node_program`) is sent on stdin to ``python3 -`` with the node's
health config, runs the node-local checks there and answers JSON. In parallel the Slurm
controller is asked for ``sinfo``/``scontrol``/``sacctmgr`` (or a control-plane node for
``kubectl``). Then, for the nodes whose prerequisites passed, one more round trip to the
controller runs ``srun -N1 -w <node> hostname`` for all of them at once.

SSH always checks host keys (``StrictHostKeyChecking=yes`` with the spec's known_hosts).
An unreachable node is a failure of that node (``connection.ssh``), never a crash.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Protocol

from gpuforge.progress import Milestone
from gpuforge.render import render_managed, render_node
from gpuforge.render.health import health_config
from gpuforge.render.node_program import node_program
from gpuforge.spec import Role, Spec
from gpuforge.spec.bounded_read import NodeOutputError, bounded_json, run_bounded
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node, nodes_with, resolve_nodes, select_limit
from gpuforge.validator import (
    cluster,
    cluster_config,
    cluster_gpu_jobs,
    cluster_k8s,
    cluster_slurm_version,
    k8s_probe,
    site_checks,
)
from gpuforge.validator.cluster import CONNECTION, ClusterData
from gpuforge.validator.cluster_fabric import PAIRS, run_pairs
from gpuforge.validator.config_drift import managed_units
from gpuforge.validator.node.base import BLOCKED, FAIL, LAYERS, PASS, SKIP
from gpuforge.validator.node.framework import Check, Result, evaluate
from gpuforge.validator.node.inputs import INPUTS, READ_MANAGED, READ_SLURM_VERSION, SLURM_VERSIONS
from gpuforge.validator.registry import ALL_CHECKS, resolve
from gpuforge.validator.report import NodeReport, Report

NODE_TIMEOUT_S = 60.0
#: ssh's ConnectTimeout: the TCP connection, and then sshd's banner, each within this.
SSH_CONNECT_TIMEOUT_S = 10
#: Cluster checks that need sinfo/scontrol/sacctmgr from the controller.
SLURM_QUERY_CHECKS = frozenset(
    {
        "scheduler.node_state",
        "scheduler.gres",
        "scheduler.partitions",
        "scheduler.accounting",
        "job.srun",
        "config.slurm_conf_hash",
    }
)
_MISSING = Result("-", "connection", "critical", SKIP, "not run")


@dataclass
class Completed:
    """What a remote command returned; rc 255 (ssh) means the node was not reached."""

    rc: int
    stdout: str
    stderr: str
    duration_s: float


class Transport(Protocol):
    """Runs a shell command on a node."""

    def run(self, node: Node, command: str, stdin: bytes | None = None, timeout: float = NODE_TIMEOUT_S) -> Completed:
        """Run ``command`` on ``node`` (``stdin`` fed to it)."""
        ...


#: For sessions that carry no secret (the node program, its config of paths and settings, check
#: results; the node lock): the classic key exchanges only, curve25519 first, not OpenSSH's default
#: post-quantum hybrid, whose key generation costs the control host's ssh client about 0.13 of its
#: 0.15 CPU-seconds a session here (0.02 s with curve25519; 6 CPU-s of a 48-node validate). An
#: explicit list, not ``^curve25519...`` (that prefix needs OpenSSH 8.7 on the control host); the
#: ECDH and DH groups after it let a server without curve25519 (FIPS mode) agree. Sessions that
#: carry a secret (``gpuforge kubeconfig``, the deploys' own connection) keep the default.
NO_SECRET_KEX_OPTION = (
    "-o",
    "KexAlgorithms=curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,"
    "ecdh-sha2-nistp521,diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,"
    "diffie-hellman-group18-sha512,diffie-hellman-group14-sha256",
)


class SshTransport:
    """The system ``ssh`` with host-key checking always on (``StrictHostKeyChecking=yes``).

    ``options``: more ``-o`` settings before the destination (``NO_SECRET_KEX_OPTION`` for
    sessions that carry no secret).
    """

    strict = True

    def __init__(self, cluster: Cluster, options: tuple[str, ...] = ()) -> None:
        self.spec = cluster.spec
        self.spec_dir = cluster.folder
        self.options = options
        self._vagrant: dict[str, Any] | None = None

    def _endpoint(self, node: Node) -> tuple[str, int, str, str | None]:
        """(host, port, user, key) of the node's SSH connection (vagrant nodes: from ``vagrant ssh-config``)."""
        ssh = self.spec.ssh
        if node.connector is Connector.VAGRANT:
            vh = self.vagrant_hosts().get(node.name)
            if vh is None:
                raise OSError(f"vagrant ssh-config has no machine {node.name}")
            return vh.hostname, vh.port, vh.user, vh.identity_file or ssh.key
        return node.ssh_target, ssh.port, ssh.user, ssh.key

    def target(self, node: Node) -> tuple[str, int]:
        """The host and port SSH connects to for ``node`` (what known_hosts must pin)."""
        host, port, _user, _key = self._endpoint(node)
        return host, port

    def argv(self, node: Node) -> list[str]:
        """ssh argv up to (and including) the destination."""
        ssh = self.spec.ssh
        host, port, user, key = self._endpoint(node)
        argv = ["ssh", *self.options, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
        argv += ["-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"]
        argv += ["-o", "LogLevel=ERROR", "-o", "ServerAliveInterval=10", "-p", str(port), "-l", user]
        if ssh.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={os.path.expanduser(ssh.known_hosts)}"]
        if key:
            argv += ["-i", os.path.expanduser(key), "-o", "IdentitiesOnly=yes"]
        return [*argv, "--", host]

    def vagrant_hosts(self) -> dict[str, Any]:
        """``vagrant ssh-config`` of the spec's folder (asked once)."""
        if self._vagrant is None:
            from gpuforge.probes.vagrant import ssh_config

            self._vagrant = dict(ssh_config(str(self.spec_dir)))
        return self._vagrant

    def run(self, node: Node, command: str, stdin: bytes | None = None, timeout: float = NODE_TIMEOUT_S) -> Completed:
        """Run ``command``; once more when ssh itself failed before the command said a word (exit
        255, no output) because the node's sshd hung up (``ssh_failure_is_passing``), if time is left."""
        t0 = time.monotonic()
        done = self._run_once(node, command, stdin, timeout)
        spent = time.monotonic() - t0
        if done.rc == 255 and not done.stdout and ssh_failure_is_passing(done.stderr) and spent < timeout / 2:
            time.sleep(1.0)
            again = self._run_once(node, command, stdin, timeout - spent - 1.0)
            return Completed(again.rc, again.stdout, again.stderr, time.monotonic() - t0)
        return done

    def _run_once(self, node: Node, command: str, stdin: bytes | None, timeout: float) -> Completed:
        t0 = time.monotonic()
        try:
            argv = [*self.argv(node), command]
        except (OSError, RuntimeError) as e:
            return Completed(255, "", str(e), 0.0)
        try:
            cp = run_bounded(argv, stdin or b"", timeout)
        except subprocess.TimeoutExpired:
            return Completed(124, "", f"no answer within {timeout:g} s", time.monotonic() - t0)
        except NodeOutputError as e:
            return Completed(1, "", f"{node.name}: {e}", time.monotonic() - t0)
        except OSError as e:
            return Completed(255, "", f"cannot run ssh: {e}", time.monotonic() - t0)
        return Completed(
            cp.returncode,
            cp.stdout.decode("utf-8", "replace"),
            cp.stderr.decode("utf-8", "replace"),
            time.monotonic() - t0,
        )


def _ssh_targets(tr: Transport, nodes: list[Node]) -> dict[str, tuple[str, int]]:
    """Per node, the host and port the transport connects to (those it can name)."""
    target = getattr(tr, "target", None)
    found: dict[str, tuple[str, int]] = {}
    if target is None:
        return found
    for node in nodes:
        try:
            found[node.name] = target(node)
        except (OSError, RuntimeError):  # the connection check reports why
            continue
    return found


def ssh_failure_is_passing(stderr: str) -> bool:
    """True when the node's sshd took the connection and then hung up: nothing said (at
    LogLevel=ERROR ssh is silent when the node closes after the key exchange), a closed or reset
    connection, or no banner within ConnectTimeout ("Connection timed out during banner exchange":
    the kernel accepted, sshd was too busy to answer). A busy sshd does that (MaxStartups, load);
    another try soon may well pass. Not a node that does not answer at all (the connect itself timed
    out), refuses, has no route, or refuses the key or the login: trying again would only add time."""
    low = " ".join(stderr.split()).lower()
    passing = ("closed by", "reset by", "kex_exchange_identification", "timed out during banner exchange")
    return not low or any(words in low for words in passing)


def explain_ssh_failure(stderr: str, rc: int) -> str:
    """A one-line reason why a node could not be reached."""
    text = " ".join(stderr.split())
    low = text.lower()
    if "host key verification failed" in low or "remote host identification has changed" in low:
        return f"host key verification failed (check the spec's known_hosts): {text[:200]}"
    if "permission denied" in low:
        return f"SSH login refused (key or user): {text[:200]}"
    if rc == 124:
        return text or "no answer in time"
    if not text and rc == 255:  # at LogLevel=ERROR ssh is silent when the node hangs up after the key exchange
        return "ssh exited with status 255 and no message: the node closed the connection after the key exchange"
    return text[:300] or f"ssh exited with status {rc}"


def remote_shell(spec: Spec, command: str) -> str:
    """``command`` as the node runs it (whole under ``sudo -n sh -c`` for a non-root user with ``ssh.sudo``)."""
    return f"sudo -n sh -c {shlex.quote(command)}" if spec.ssh.sudo else command


def _config_reader(spec: Spec, tr: Transport) -> cluster_config.Reader:
    def run(node: Node, command: str) -> tuple[int, str, str]:
        done = tr.run(node, remote_shell(spec, command))
        return done.rc, done.stdout, done.stderr

    return run


def remote_python(spec: Spec, args: Sequence[str]) -> str:
    """``python3 - ARGS`` (``sudo -n`` for a non-root user with ``ssh.sudo``)."""
    cmd = "python3 - " + " ".join(shlex.quote(a) for a in args)
    return f"sudo -n {cmd}" if spec.ssh.sudo else cmd


@dataclass
class NodeRun:
    """The node-local part of one node."""

    node: Node
    connection: Result
    results: list[Result]
    data: dict[str, Any]


def run_node(
    spec: Spec,
    node: Node,
    transport: Transport,
    node_checks: list[Check],
    timeout: float = NODE_TIMEOUT_S,
    read_managed: bool = False,
    read_slurm: bool = False,
) -> NodeRun:
    """Send the node program to the node, run its checks there, read the JSON answer (with the
    managed files' digests in its data when ``read_managed``: the config layer's one round trip; with
    the node's Slurm versions when ``read_slurm`` and the node runs Slurm: ``scheduler.slurm_version``)."""
    managed = render_managed(spec, node)
    cfg = health_config(spec, node, managed)
    # validate's config layer judges the managed files itself (with diffs): the node program only reads
    # their digests (paths only sent), in the same round trip as its checks.
    cfg.pop("config_files")
    if read_managed:  # every file the node gets, the health check's own two included
        cfg["config_files"] = [{"path": f.path} for f in render_node(spec, node)]
        cfg[READ_MANAGED] = True
    cfg["managed_units"] = managed_units(spec, node, managed)
    if read_slurm and cluster.gate_slurm_node(spec, node) is None:
        cfg[READ_SLURM_VERSION] = True
    args = ["--validate", "--json", "--no-slurm", "--config-b64", base64.b64encode(json.dumps(cfg).encode()).decode()]
    if node_checks:
        args += ["--checks", ",".join(c.id for c in node_checks)]
    else:
        args += ["--checks", "connection.none"]
    done = transport.run(node, remote_python(spec, args), node_program(), timeout + _slow_budget(cfg, node_checks))

    def conn(status: str, message: str) -> Result:
        return Result(CONNECTION.id, CONNECTION.layer, CONNECTION.severity, status, message, round(done.duration_s, 4))

    if done.rc in (255, 124):
        return NodeRun(
            node, conn(FAIL, f"{node.name} unreachable: {explain_ssh_failure(done.stderr, done.rc)}"), [], {}
        )
    doc = _last_json(done.stdout)
    if doc is None:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        if "python3" in tail and ("not found" in tail or "No such file" in tail):
            tail = "python3 not found on the node (gpuforge needs python3 on nodes)"
        return NodeRun(node, conn(FAIL, f"reached {node.name}, but the node checks did not run: {tail}"), [], {})
    results = node_results(doc, {c.id for c in node_checks})
    data = doc.get("data") or {}
    if results is None or not isinstance(data, dict):
        return NodeRun(node, conn(FAIL, f"reached {node.name}, but its node checks' report is malformed"), [], {})
    return NodeRun(node, conn(PASS, f"reached {node.name} over SSH in {done.duration_s:.2f} s"), results, data)


def _slow_budget(cfg: dict[str, Any], node_checks: list[Check]) -> float:
    """Extra seconds for the slow, validate-only probes this node will run."""
    extra = 0.0
    for c in node_checks:
        if not c.health and c.gate and not c.gate(cfg):
            extra += sum(INPUTS[k].timeout(cfg) for k in c.needs if not INPUTS[k].cheap)
    if cfg.get(READ_SLURM_VERSION):  # read after the checks, in the same round trip
        extra += SLURM_VERSIONS.timeout(cfg)
    return extra


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                doc = bounded_json(line)
            except NodeOutputError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def node_results(doc: dict[str, Any], wanted: set[str]) -> list[Result] | None:
    """The node program's results for the checks asked (None: a malformed entry, the node's error)."""
    entries = doc.get("results", [])
    if not isinstance(entries, list):
        return None
    out = []
    for r in entries:
        if not isinstance(r, dict) or not all(isinstance(k, str) for k in r):
            return None
        if r.get("id") in wanted:
            try:
                out.append(Result(**r))
            except (TypeError, ValueError):
                return None
    return out


def _unreached(checks: Iterable[Check], why: str) -> list[Result]:
    return [Result(c.id, c.layer, c.severity, BLOCKED, f"{CONNECTION.id} failed: {why}"[:300]) for c in checks]


def _partition_for(spec: Spec, node: Node) -> str | None:
    want, default = cluster.expected_partitions(spec, node)
    return default or (want[0] if want else None)


SITE_TOKENS = ("site", "site.*")


def _collect(futures: dict[str, Future[NodeRun]], say: Callable[[str], None], t0: float) -> dict[str, NodeRun]:
    """Each node's run as it finishes: a milestone per node, and who is still being read."""
    runs: dict[str, NodeRun] = {}
    for f in as_completed(futures.values()):
        run = f.result()
        runs[run.node.name] = run
        failed = sum(r.status == FAIL for r in run.results) + (run.connection.status != PASS)
        say(
            Milestone(
                f"{run.node.name}: {len(run.results)} node check(s), {failed} failed, {time.monotonic() - t0:.1f} s"
            )
        )
        waiting = sorted(n for n, fu in futures.items() if not fu.done())
        if waiting:
            more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
            say(f"{len(runs)}/{len(futures)} node(s) read; waiting for {', '.join(waiting[:3])}{more} "
                f"({time.monotonic() - t0:.0f} s)")  # fmt: skip
    return {name: runs[name] for name in futures}


def _site_selection(
    checks: str | Sequence[str] | None, exclude: str | Sequence[str] | None
) -> tuple[bool, list[str] | None, list[str] | None]:
    """(run the site checks?, the other --checks tokens, the other --exclude tokens).

    Site checks (layer ``site``) are not in the registry: they come from the spec. They run when
    every check is wanted or ``site`` is named, and not when ``site`` is excluded.
    """

    def tokens(value: str | Sequence[str] | None) -> list[str]:
        if value is None:
            return []
        items = value.split(",") if isinstance(value, str) else list(value)
        return [t.strip() for t in items if t.strip()]

    want, skip = tokens(checks), tokens(exclude)
    named = any(t in SITE_TOKENS for t in want)
    site = (not want or named) and not any(t in SITE_TOKENS for t in skip)
    rest = [t for t in want if t not in SITE_TOKENS]
    if want and not rest:
        rest = [CONNECTION.id]  # only the site checks: and the connection they rely on
    others = [t for t in skip if t not in SITE_TOKENS]
    return site, rest or None, others or None


def validate(
    loaded: Cluster,
    checks: str | Sequence[str] | None = None,
    limit: str | None = None,
    *,
    transport: Transport | None = None,
    on_event: Callable[[str], None] | None = None,
    exclude: str | Sequence[str] | None = None,
) -> Report:
    """Validate the cluster (or the nodes in ``limit``) against the spec ``loaded`` (read once by the
    command line); never raises for node problems.

    ``checks``: ids, id prefixes or layers (their dependencies run too); ``exclude`` drops some
    (e.g. ``scheduler.node_state`` for nodes a rolling apply drained on purpose). Raises
    ``registry.UnknownCheck`` for an unknown token and ``ValueError`` when ``limit`` selects no node.
    """
    spec = loaded.spec
    t_start = time.monotonic()
    started = time.time()
    say = on_event or (lambda _m: None)
    want_site, checks, exclude = _site_selection(checks, exclude)
    want_site = want_site and bool(spec.site.testinfra)
    selected = resolve(checks, exclude)
    selected_ids = {c.id for c in selected}
    nodes = _limited_nodes(spec, limit)
    tr = transport or SshTransport(loaded, options=NO_SECRET_KEX_OPTION)
    node_checks = [c for c in selected if c.scope == "node"]
    cluster_checks = [c for c in selected if c.scope in ("cluster", "control") and c is not CONNECTION]

    data = ClusterData(spec=spec, spec_path=loaded.path, nodes=nodes)
    data.ssh_strict = bool(getattr(tr, "strict", True))
    data.ssh_targets = _ssh_targets(tr, nodes)
    controllers = nodes_with(spec, Role.CONTROLLER)
    want_slurm = spec.slurm is not None and any(c.id in SLURM_QUERY_CHECKS for c in cluster_checks)
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    want_kube = spec.kubernetes is not None and any(c.id.startswith("scheduler.k8s_") for c in cluster_checks)
    data.controller = controllers[0].name if controllers else None
    data.kube_node = planes[0].name if planes else None

    say(f"reading {len(nodes)} node(s)")
    with ThreadPoolExecutor(max_workers=max(4, min(32, len(nodes) + 2))) as pool:
        read_managed = cluster_config.CONFIG_FILES in selected_ids
        read_slurm = cluster_slurm_version.SLURM_VERSION_CHECK in selected_ids
        futures = {
            n.name: pool.submit(run_node, spec, n, tr, node_checks, NODE_TIMEOUT_S, read_managed, read_slurm)
            for n in nodes
        }
        slurm_f = pool.submit(tr.run, controllers[0], cluster.SLURM_QUERY) if want_slurm and controllers else None
        kube_f = pool.submit(tr.run, planes[0], _kube_command(spec)) if want_kube and planes else None
        site_f = _start_site_checks(pool, loaded, tr, nodes, say) if want_site else {}
        reader = _config_reader(spec, tr)
        gathered = {g.key: pool.submit(g.fn, data, reader) for g in cluster.GATHERERS if g.checks & selected_ids}
        runs = _collect(futures, say, time.monotonic())
        config_f = (
            {n.name: pool.submit(cluster_config.judge_config, data, n, runs[n.name].data, reader) for n in nodes}
            if read_managed
            else {}
        )
        data.gathered = {key: f.result() for key, f in gathered.items()}
        site_runs = {name: f.result() for name, f in site_f.items()}
        data.config = {name: f.result() for name, f in config_f.items()}
        slurm_done = slurm_f.result() if slurm_f else None
        kube_done = kube_f.result() if kube_f else None

    if want_slurm:
        _read_slurm_answer(data, slurm_done)
    if want_kube:
        _read_kube_answer(data, kube_done, tr, selected_ids, planes, say)
    _merge_node_runs(data, nodes, runs, node_checks)
    _judge_cluster_checks(data, tr, cluster_checks, controllers, say)
    reports = _node_reports(data, nodes, runs, site_runs, selected_ids)
    return Report(spec.cluster.name, str(loaded.path), reports, started, time.monotonic() - t_start)


def _read_slurm_answer(data: ClusterData, done: Any) -> None:
    """The controller's Slurm query into ``data`` (no controller: an error the Slurm checks report)."""
    if done is None:
        data.slurm_error = "the spec has no controller node"
    else:
        _read_slurm(data, done)


def _read_kube_answer(
    data: ClusterData, done: Any, tr: Transport, selected_ids: set[str], planes: list[Node], say: Callable[[str], None]
) -> None:
    """The control plane's answer into ``data`` (no control-plane node: an error the k8s checks report)."""
    if done is None:
        data.kube_error = "the spec has no control-plane node"
    else:
        _read_kube(data, done, tr, selected_ids, planes, say)


def _limited_nodes(spec: Spec, limit: str | None) -> list[Node]:
    """The spec's nodes, or those ``limit`` selects (SpecError naming --limit when it names no node)."""
    nodes = resolve_nodes(spec)
    if not limit:
        return nodes
    names = set(select_limit(spec, limit))
    return [n for n in nodes if n.name in names]


def _kube_command(spec: Spec) -> str:
    """The control plane's one Kubernetes query for the operator's namespace and the queue kind."""
    kube_ns = spec.kubernetes.gpu_operator.namespace if spec.kubernetes else "gpu-operator"
    queue_kind = spec.kubernetes.batch_queue.kind if spec.kubernetes else "none"
    return cluster_k8s.kube_query(kube_ns, queue_kind)


def _read_slurm(data: ClusterData, done: Any) -> None:
    """The controller's Slurm query into ``data`` (or why it could not be read)."""
    if done.rc in (255, 124):
        data.slurm_error = f"controller {data.controller} unreachable: {explain_ssh_failure(done.stderr, done.rc)}"
    else:
        cluster.apply_slurm_query(data, done.stdout)


def _read_kube(
    data: ClusterData, done: Any, tr: Transport, selected_ids: set[str], planes: list[Node], say: Callable[[str], None]
) -> None:
    """The control plane's Kubernetes query into ``data``, then the probe pods when asked for."""
    spec = data.spec
    if done.rc in (255, 124):
        data.kube_error = f"{data.kube_node} unreachable: {explain_ssh_failure(done.stderr, done.rc)}"
        return
    cluster_k8s.apply_kube_query(data, done.stdout)
    if data.kube_error is None and selected_ids & set(k8s_probe.PROBE_CHECKS) and planes:
        say(f"probing the cluster from {planes[0].name} (CUDA sample pod, queue admission)")
        tenants = len(spec.kubernetes.batch_queue.tenants) if spec.kubernetes else 0
        bound = k8s_probe.PROBE_WAIT_S + k8s_probe.ADMISSION_WAIT_S * tenants + 120
        probe = tr.run(planes[0], k8s_probe.probe_query(spec), timeout=bound)
        if probe.rc not in (255, 124):
            data.kube_probe = k8s_probe.parse_probe(probe.stdout)


def _merge_node_runs(data: ClusterData, nodes: list[Node], runs: dict[str, Any], node_checks: list[Check]) -> None:
    """Each node's own results (a node not reached: its checks blocked on the connection)."""
    for n in nodes:
        run = runs[n.name]
        got = {r.id: r for r in run.results}
        node_results = {CONNECTION.id: run.connection}
        if run.connection.status != PASS:
            node_results.update({r.id: r for r in _unreached(node_checks, run.connection.message)})
        else:
            for c in node_checks:
                node_results[c.id] = got.get(c.id) or Result(
                    c.id, c.layer, c.severity, FAIL, "the node did not report this check (older gpuforge-health?)"
                )
        data.results[n.name] = node_results
        data.node_data[n.name] = run.data


def _judge(data: ClusterData, c: Check, n: Node) -> Result:
    gate = c.gate(data.spec, n) if c.gate else None
    return evaluate(c, gate, data.results[n.name], lambda: c.fn(data, n))


def _judge_cluster_checks(
    data: ClusterData, tr: Transport, checks: list[Check], controllers: list[Node], say: Callable[[str], None]
) -> None:
    """The cluster checks per node; ``job.srun`` then ``job.gpu_binding`` last, as job steps on the controller."""
    jobs = ("job.srun", "job.gpu_binding")
    if any(c.id == PAIRS for c in checks):  # traffic between nodes, before it is judged
        run_pairs(data, lambda n, cmd, t: tr.run(n, remote_shell(data.spec, cmd), None, t), say)
    for c in [c for c in checks if c.id not in jobs]:
        for n in data.nodes:
            data.results[n.name][c.id] = _judge(data, c, n)
    for c in [c for cid in jobs for c in checks if c.id == cid]:
        _run_job_check(data, tr, c, controllers, say)


def _run_job_check(
    data: ClusterData, tr: Transport, check: Check, controllers: list[Node], say: Callable[[str], None]
) -> None:
    """One job check: its job steps on the first controller for the nodes it applies to, then judged."""
    spec, took, gpu = data.spec, 0.0, check.id == "job.gpu_binding"
    targets = []
    for n in data.nodes:
        gate = check.gate(spec, n) if check.gate else None
        deps_ok = all(data.results[n.name].get(d, _MISSING).status == PASS for d in check.depends_on)
        if not gate and deps_ok:
            targets.append((n.name, _partition_for(spec, n)))
    if targets and controllers and not data.slurm_error:
        say(f"{'GPU job' if gpu else 'srun'} on {len(targets)} node(s)")
        if gpu:
            gres = [(name, p, cluster_gpu_jobs.gpu_request(spec, _node(data, name)) or "gpu:1") for name, p in targets]
            cmd, budget = cluster_gpu_jobs.gpu_job_command(gres), cluster_gpu_jobs.GPU_JOB_TIMEOUT_S + 20
        else:
            cmd, budget = cluster.srun_command(targets), cluster.SRUN_GROUP_TIMEOUT_S + cluster.SRUN_TIMEOUT_S + 20
        done = tr.run(controllers[0], cmd, None, budget)
        if done.rc in (255, 124):
            data.slurm_error = f"controller {data.controller}: {explain_ssh_failure(done.stderr, done.rc)}"
        elif gpu:
            data.gpu_jobs, took = cluster_gpu_jobs.parse_gpu_jobs(done.stdout), done.duration_s
        else:
            data.srun, took = cluster.parse_srun_output(done.stdout), done.duration_s
    ran = data.gpu_jobs if gpu else data.srun
    for n in data.nodes:
        r = _judge(data, check, n)
        if n.name in ran and r.status in (PASS, FAIL):
            r.duration_s = round(took, 4)
        data.results[n.name][check.id] = r


def _node(data: ClusterData, name: str) -> Node:
    return next(n for n in data.nodes if n.name == name)


def _node_reports(
    data: ClusterData, nodes: list[Node], runs: dict[str, Any], site_runs: dict[str, Any], selected_ids: set[str]
) -> list[NodeReport]:
    """Each node's selected results with its site checks, in layer and check order."""
    order = {c.id: i for i, c in enumerate(ALL_CHECKS)}
    reports = []
    for n in nodes:
        results = [r for cid, r in data.results[n.name].items() if cid in selected_ids]
        site = site_runs.get(n.name, [])
        if site and runs[n.name].connection.status != PASS:
            site = site_checks.blocked(site, f"{CONNECTION.id} failed: {runs[n.name].connection.message}")
        results += site
        results.sort(key=lambda r: (LAYERS.index(r.layer), order.get(r.id, 0)))
        reports.append(NodeReport(n.name, results))
    return reports


def _start_site_checks(
    pool: ThreadPoolExecutor,
    loaded: Cluster,
    tr: Transport,
    nodes: list[Node],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The site's testinfra checks of each node that has some, started in ``pool``."""
    spec, spec_dir = loaded.spec, loaded.folder
    vagrant = getattr(tr, "vagrant_hosts", dict)
    started = {
        n.name: pool.submit(site_checks.site_results, spec, spec_dir, n, vagrant)
        for n in nodes
        if site_checks.checks_for(spec, n)
    }
    if started:
        say(f"site checks (testinfra) on {len(started)} node(s)")
    return started
