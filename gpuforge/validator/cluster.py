"""Cluster-wide checks: what only the controller, the control host or all nodes together can tell.

Each check is judged per node (a row of the report) from data the runner gathered:
``sinfo``/``scontrol`` and ``srun`` from the Slurm controller, ``kubectl`` from a control-plane
node, the munge key digests of every node, and the control host's known_hosts file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.probes.slurm import SCONTROL_NODES, SINFO_NODES, SinfoInfo
from gpuforge.probes.slurm_log import SLURMCTLD_CONF_HASH, ConfHashLog
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node, nodes_with, select_nodes
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, SKIP, WARNING, Outcome
from gpuforge.validator.node.framework import Check, Result

#: sinfo base states in which a node takes jobs.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
#: sinfo flags that make a node unusable.
BAD_FLAGS = frozenset({"not_responding", "drain", "powered_off", "powering_down", "maintenance", "reboot_issued"})
SRUN_TIMEOUT_S = 20
#: The one job step per partition first tried across all its nodes (``srun_command``).
SRUN_GROUP_TIMEOUT_S = 10


@dataclass
class ClusterData:
    """What the runner gathered for the cluster-wide checks."""

    spec: Spec
    spec_path: Path
    nodes: list[Node]
    results: dict[str, dict[str, Result]] = field(default_factory=dict)
    """Per node: the results so far (connection, node-local, earlier cluster checks)."""
    node_data: dict[str, dict[str, Any]] = field(default_factory=dict)
    controller: str | None = None
    slurm_error: str | None = None
    sinfo: SinfoInfo | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    slurmd_started: dict[str, str] = field(default_factory=dict)
    """Per Slurm node: its SlurmdStartTime as the controller reports it."""
    conf_hash_log: ConfHashLog | None = None
    """What slurmctld's log says of config hashes (``config.slurm_conf_hash``); None: not read."""
    clusters: list[str] | None = None
    srun: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    gpu_jobs: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    """Per GPU node: what the one-GPU job step printed (``cluster_gpu_jobs``)."""
    kube_node: str | None = None
    kube_error: str | None = None
    kube_nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    kube_pods: list[dict[str, Any]] | None = None
    kube_queues: list[dict[str, Any]] | None = None
    """The cluster's Kueue ClusterQueues or Volcano Queues (None: not read, or kubectl failed)."""
    kube_queues_error: str | None = None
    kube_probe: dict[str, Any] | None = None
    """What the probe on the first control plane saw (``k8s_probe.parse_probe``); None: not run."""
    config: dict[str, Any] = field(default_factory=dict)
    """Per node: its managed files as read (``cluster_config.ConfigRead``); empty when not checked."""
    ssh_strict: bool = True
    """The transport's ssh options carry StrictHostKeyChecking=yes."""
    ssh_targets: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Per node, the (host, port) SSH connects to, where it is not the spec's (vagrant nodes)."""
    gathered: dict[str, Any] = field(default_factory=dict)
    """What each of :data:`GATHERERS` read, by its key (absent: its checks were not selected)."""


ClusterFn = Callable[[ClusterData, Node], Outcome]
#: Runs a shell command on a node: ``(rc, stdout, stderr)`` (the validator's transport).
NodeRun = Callable[[Node, str], tuple[int, str, str]]


@dataclass(frozen=True)
class Gatherer:
    """Reads what some cluster checks judge (``fn(data, run)``), once per validate, when one of
    ``checks`` is selected; the runner keeps the result in ``data.gathered[key]``."""

    key: str
    checks: frozenset[str]
    fn: Callable[[ClusterData, NodeRun], Any]


GATHERERS: list[Gatherer] = []
ClusterGate = Callable[[Spec, Node], "str | None"]
CLUSTER_CHECKS: list[Check] = []


def cluster_check(
    id: str,
    layer: str,
    severity: str,
    description: str,
    depends_on: tuple[str, ...] = (),
    gate: ClusterGate | None = None,
    scope: str = "cluster",
) -> Callable[[ClusterFn], ClusterFn]:
    """Register a cluster-wide check (judged per node)."""

    def wrap(fn: ClusterFn) -> ClusterFn:
        CLUSTER_CHECKS.append(Check(id, layer, severity, description, fn, depends_on, (), gate, False, scope))
        return fn

    return wrap


CONNECTION = Check(
    "connection.ssh",
    "connection",
    CRITICAL,
    "The node answers over SSH (host key checked) and runs the node checks",
    lambda *_: (FAIL, "set by the runner"),
    scope="control",
)


# --------------------------------------------------------------------------- gates


def gate_slurm_compute(spec: Spec, node: Node) -> str | None:
    if spec.slurm is None:
        return "not a Slurm cluster"
    return None if node.has(Role.COMPUTE) else "not a Slurm compute node"


def gate_slurm_node(spec: Spec, node: Node) -> str | None:
    if spec.slurm is None:
        return "not a Slurm cluster"
    if not node.roles & {Role.CONTROLLER, Role.COMPUTE, Role.LOGIN, Role.ACCOUNTING_DB}:
        return "not a Slurm node"
    return None


def gate_accounting(spec: Spec, node: Node) -> str | None:
    if spec.slurm is None:
        return "not a Slurm cluster"
    if not spec.slurm.accounting.enabled:
        return "accounting is off in the spec"
    controllers = nodes_with(spec, Role.CONTROLLER)
    return None if controllers and controllers[0].name == node.name else "checked on the first controller"


# --------------------------------------------------------------------------- Slurm


def _sinfo_node(data: ClusterData, node: Node) -> tuple[dict[str, Any] | None, Outcome | None]:
    if data.slurm_error:
        return None, (BLOCKED, f"cannot ask the controller: {data.slurm_error}")
    if data.sinfo is None:
        return None, (BLOCKED, "sinfo did not run")
    entry = data.sinfo["nodes"].get(node.name)
    if entry is None:
        return None, (FAIL, f"sinfo does not list {node.name} (not in slurm.conf?)")
    return dict(entry), None


def expected_gres(spec: Spec, node: Node) -> list[str]:
    """The node's GRES as slurm.conf declares them from the spec."""
    from gpuforge.render.slurm import node_gres

    group = next(g for g in spec.node_groups if g.name == node.group)
    return sorted(node_gres(spec, group))


def normalize_gres(items: list[str]) -> list[str]:
    """``gpu:h100:8(S:0-1)`` -> ``gpu:h100:8``."""
    return sorted(re.sub(r"\(.*\)$", "", item).strip() for item in items)


def expected_partitions(spec: Spec, node: Node) -> tuple[list[str], str | None]:
    """Partitions that contain the node, and the default one among them."""
    if spec.slurm is None:
        return [], None
    parts = [p for p in spec.slurm.partitions if node.name in select_nodes(spec, p.nodes)]
    default = next((p.name for p in parts if p.default), None)
    return sorted(p.name for p in parts), default


@cluster_check(
    "scheduler.node_state",
    "scheduler",
    CRITICAL,
    "Slurm sees the node in a usable state (idle/mixed/allocated), not drained or down",
    gate=gate_slurm_compute,
)
def node_state(data: ClusterData, node: Node) -> Outcome:
    entry, early = _sinfo_node(data, node)
    if early:
        return early
    assert entry is not None
    state, flags = entry["state"], entry["flags"]
    bad = [f for f in flags if f in BAD_FLAGS]
    if state in USABLE_STATES and not bad:
        return PASS, f"{node.name} is {entry['raw_state']}"
    reason = data.reasons.get(node.name)
    return FAIL, f"{node.name} is {entry['raw_state']}" + (f" (reason: {reason})" if reason else "")


@cluster_check("scheduler.gres", "scheduler", CRITICAL, "GRES per node as the spec declares", gate=gate_slurm_compute)
def gres(data: ClusterData, node: Node) -> Outcome:
    entry, early = _sinfo_node(data, node)
    if early:
        return early
    assert entry is not None
    want = expected_gres(data.spec, node)
    have = normalize_gres(entry["gres"])
    if want == have:
        return PASS, f"GRES {','.join(have)}" if have else "no GRES, as the spec declares"
    return FAIL, f"GRES {','.join(have) or '(none)'}, the spec declares {','.join(want) or '(none)'}"


@cluster_check(
    "scheduler.partitions", "scheduler", WARNING, "Partitions per node as the spec declares", gate=gate_slurm_compute
)
def partitions(data: ClusterData, node: Node) -> Outcome:
    entry, early = _sinfo_node(data, node)
    if early:
        return early
    assert entry is not None
    want, default = expected_partitions(data.spec, node)
    have = sorted(entry["partitions"])
    if want != have:
        return FAIL, f"in partitions {','.join(have) or '(none)'}, the spec says {','.join(want) or '(none)'}"
    if default and entry.get("default_partition") != default:
        return FAIL, f"default partition is {entry.get('default_partition') or '(none)'}, the spec says {default}"
    return PASS, f"partitions {','.join(have)}" + (f" (default {default})" if default else "")


@cluster_check(
    "scheduler.accounting",
    "scheduler",
    WARNING,
    "slurmdbd knows the cluster (sacctmgr show cluster)",
    depends_on=("scheduler.slurmctld",),
    gate=gate_accounting,
)
def accounting(data: ClusterData, node: Node) -> Outcome:
    if data.slurm_error:
        return BLOCKED, f"cannot ask the controller: {data.slurm_error}"
    if data.clusters is None:
        return FAIL, "sacctmgr show cluster failed (slurmdbd unreachable?)"
    name = data.spec.cluster.name
    if name in data.clusters:
        return PASS, f"slurmdbd has cluster {name}"
    return FAIL, f"slurmdbd does not list cluster {name} (has: {', '.join(data.clusters) or 'none'})"


@cluster_check(
    "job.srun",
    "job",
    CRITICAL,
    "A job runs on the node: srun -N1 -w <node> hostname from the controller",
    depends_on=("scheduler.node_state", "scheduler.slurmd"),
    gate=gate_slurm_compute,
)
def srun(data: ClusterData, node: Node) -> Outcome:
    if node.name not in data.srun:
        return BLOCKED, f"srun did not run ({data.slurm_error or 'controller not reached'})"
    rc, out = data.srun[node.name]
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if rc == 124:
        return FAIL, f"srun -w {node.name} hostname did not finish within {SRUN_TIMEOUT_S} s"
    if rc != 0:
        return FAIL, f"srun -w {node.name} hostname failed (exit {rc}): {' | '.join(lines[-2:]) or 'no output'}"
    # srun's own notes on stderr ("srun: job 2 queued and waiting for resources", "... has been
    # allocated resources": the node still completing the job before) come before the step's output.
    printed = [line for line in lines if not SRUN_NOTE.match(line)]
    first = printed[0] if printed else ""
    if first == node.name or first.startswith(node.name + "."):
        return PASS, f"srun -w {node.name} hostname printed {first}"
    return FAIL, f"srun -w {node.name} hostname printed {first or 'nothing'!r}"


#: srun's informational lines about its job's allocation, printed before the step's output when the
#: job waited (as srun prints them: "srun: job 2 queued and waiting for resources", seen in this lab).
SRUN_NOTE = re.compile(r"srun: job \d+ (queued and waiting for resources|has been allocated resources)$")

#: Each line of a successful step that is a hostname (a short name, or a name with a domain):
#: ``<d>/<short name>`` gets that line and ``__rc=0``, once. Names are host labels only, so no line
#: can name a file outside ``<d>``.
_PROVEN_AWK = (
    '{ n = $0; sub(/[.].*/, "", n) } '
    "n ~ /^[A-Za-z0-9][-A-Za-z0-9]*$/ && !(n in seen) "
    '{ seen[n] = 1; f = d "/" n; print $0 > f; print "__rc=0" > f; close(f) }'
)


def srun_command(targets: list[tuple[str, str | None]]) -> str:
    """One shell script that proves a job runs on every target; per node, ``__node=``, what
    ``srun ... hostname`` printed there, and ``__rc=``.

    First ONE job step per partition across all of its targets (``-N<k> --ntasks-per-node=1``): a
    node whose hostname that step printed, in a step that ended with status 0, has run a job. Only
    the nodes not proven so (the step failed or timed out, a node printed nothing) get a job of
    their own (``srun -N1 -w <node> hostname``, all at once), whose output and status name the
    node's own fault. A healthy cluster costs one srun per partition, not one per node: at 48 lab
    nodes 1.2 s and 2.3 CPU-seconds instead of 1.7-2.4 s and 3-4.5 (and no storm of srun clients
    on the controller at a thousand nodes).
    """
    lines = ["d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT"]
    groups: dict[str, list[str]] = {}  # `` -p <partition>`` (empty: the default one) -> its nodes
    for name, partition in targets:
        groups.setdefault(f" -p {partition}" if partition else "", []).append(name)
    for i, (p, names) in enumerate(groups.items()):
        lines.append(
            f"(timeout {SRUN_GROUP_TIMEOUT_S} srun -N{len(names)} --ntasks-per-node=1 -w {','.join(names)}{p} -t 1 "
            f'-J gpuforge-validate hostname >"$d/.group{i}" 2>&1; echo "__rc=$?" >>"$d/.group{i}") &'
        )
    lines.append("wait")
    for i in range(len(groups)):  # a step that ended with 0: each hostname it printed proves its node
        lines.append(f'grep -qx \'__rc=0\' "$d/.group{i}" && awk -v d="$d" \'{_PROVEN_AWK}\' "$d/.group{i}"')
    for p, names in groups.items():
        lines += [
            f'[ -s "$d/{name}" ] || (timeout {SRUN_TIMEOUT_S} srun -N1 -n1 -w {name}{p} -t 1 -J gpuforge-validate '
            f'hostname >"$d/{name}" 2>&1; echo "__rc=$?" >>"$d/{name}") &'
            for name in names
        ]
    lines.append("wait")
    lines += [f'echo "__node={name}"; cat "$d/{name}"' for name, _ in targets]
    return "\n".join(lines)


def parse_srun_output(text: str) -> dict[str, tuple[int | None, str]]:
    """Per node: (exit status, output) from :func:`srun_command`'s output."""
    out: dict[str, tuple[int | None, str]] = {}
    node: str | None = None
    buf: list[str] = []
    rc: int | None = None

    def flush() -> None:
        if node is not None:
            out[node] = (rc, "\n".join(buf))

    for line in text.splitlines():
        if line.startswith("__node="):
            flush()
            node, buf, rc = line.split("=", 1)[1].strip(), [], None
        elif line.startswith("__rc="):
            try:
                rc = int(line.split("=", 1)[1])
            except ValueError:
                rc = None
        elif node is not None:
            buf.append(line)
    flush()
    return out


SLURM_QUERY = (
    f"echo '__section=sinfo'; {SINFO_NODES.command()}; "
    f"echo '__section=scontrol'; {SCONTROL_NODES.command()}; "
    f"echo '__section=ctldlog'; {SLURMCTLD_CONF_HASH.command()}; "
    "echo '__section=sacctmgr'; "
    "if command -v sacctmgr >/dev/null 2>&1; then timeout 10 sacctmgr -nP show cluster format=Cluster 2>&1; "
    "echo \"__rc=$?\"; else echo '__missing=sacctmgr'; fi"
)


def sections(text: str) -> dict[str, list[str]]:
    """Split ``__section=<name>`` delimited output."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("__section="):
            current = out.setdefault(line.split("=", 1)[1].strip(), [])
        elif current is not None:
            current.append(line)
    return out


def apply_slurm_query(data: ClusterData, text: str) -> None:
    """Fill ``data`` from :data:`SLURM_QUERY` output."""
    parts = sections(text)
    info = SINFO_NODES.parse(parts.get("sinfo", ["__missing=sinfo"]))
    if info["error"]:
        data.slurm_error = f"sinfo on {data.controller}: {info['error']}"
        return
    data.sinfo = info
    nodes = SCONTROL_NODES.parse(parts.get("scontrol", []))
    data.reasons = {name: rec["Reason"] for name, rec in nodes["nodes"].items() if rec.get("Reason")}
    data.slurmd_started = {
        name: rec["SlurmdStartTime"] for name, rec in nodes["nodes"].items() if rec.get("SlurmdStartTime")
    }
    if "ctldlog" in parts:
        data.conf_hash_log = SLURMCTLD_CONF_HASH.parse(parts["ctldlog"])
    acct = parts.get("sacctmgr", [])
    if any(line.startswith("__rc=0") for line in acct):
        data.clusters = [line.strip() for line in acct if line.strip() and not line.startswith("__")]


# --------------------------------------------------------------------------- security


@cluster_check(
    "security.munge_key_identical",
    "security",
    CRITICAL,
    "Every Slurm node has the same munge key (sha256)",
    depends_on=("security.munge_key",),
    gate=gate_slurm_node,
)
def munge_identical(data: ClusterData, node: Node) -> Outcome:
    digests = {
        name: d["security.munge_key"]["sha256"]
        for name, d in data.node_data.items()
        if d.get("security.munge_key", {}).get("sha256")
    }
    mine = digests.get(node.name)
    if mine is None:
        return FAIL, "no digest of this node's munge key"
    others = {n: d for n, d in digests.items() if n != node.name}
    if not others:
        return SKIP, "no other node's munge key to compare with"
    reference_node = data.controller if data.controller in digests else None
    if reference_node is None:
        reference_digest = Counter(digests.values()).most_common(1)[0][0]
        reference_node = next(n for n, d in digests.items() if d == reference_digest)
    if reference_node == node.name:
        differ = sorted(n for n, d in others.items() if d != mine)
        if differ:
            return PASS, f"reference key; {', '.join(differ)} differ"
        return PASS, f"same munge key as {len(others)} other node(s)"
    if digests[reference_node] == mine:
        return PASS, f"same munge key as {reference_node} ({len(digests)} nodes compared)"
    return FAIL, f"munge key differs from {reference_node}'s: munge cannot authenticate between them"


def _glob(pattern: str, host: str) -> bool:
    """OpenSSH host pattern match: only ``*`` and ``?`` are special (``[host]:port`` is literal)."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, host, flags=re.IGNORECASE) is not None


def _host_patterns(target: str, port: int) -> list[str]:
    return [target] if port == 22 else [f"[{target}]:{port}"]


def known_host_entries(text: str, host: str) -> list[str]:
    """Key types that ``known_hosts`` text pins for ``host`` (plain, wildcard and hashed entries)."""
    types = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if parts[0] == "@revoked":
            continue
        if parts[0].startswith("@"):
            parts = parts[1:]
        if len(parts) < 3:
            continue
        hosts, keytype = parts[0], parts[1]
        if hosts.startswith("|1|"):
            try:
                _, _, salt, digest = hosts.split("|", 3)
                mac = hmac.new(base64.b64decode(salt), host.encode(), hashlib.sha1).digest()
                if hmac.compare_digest(mac, base64.b64decode(digest)):
                    types.append(keytype)
            except (ValueError, TypeError):
                continue
            continue
        patterns = hosts.split(",")
        if any(p.startswith("!") and _glob(p[1:], host) for p in patterns):
            continue
        if any(not p.startswith("!") and _glob(p, host) for p in patterns):
            types.append(keytype)
    return types


@cluster_check(
    "security.ssh_host_keys",
    "security",
    WARNING,
    "Host keys are pinned: a known_hosts file in the spec, strict checking on every connection",
    scope="control",
)
def ssh_host_keys(data: ClusterData, node: Node) -> Outcome:
    ssh = data.spec.ssh
    # The deploys' own connections always check (gpuforge.deploy.inventory; tests/converge/test_remote.py).
    if not data.ssh_strict:
        return FAIL, "connections do not use StrictHostKeyChecking=yes"
    if not ssh.known_hosts:
        return FAIL, "spec.ssh.known_hosts is not set: host keys come from the user's own known_hosts"
    path = Path(os.path.expanduser(ssh.known_hosts))
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return FAIL, f"cannot read {path}: {e.strerror}"
    host, port = data.ssh_targets.get(node.name, (node.ssh_target, ssh.port))
    types = sorted({t for h in _host_patterns(host, port) for t in known_host_entries(text, h)})
    if not types:
        return FAIL, f"{path} has no host key for {host}"
    return PASS, f"{path} pins {host} ({', '.join(types)}); StrictHostKeyChecking=yes"
