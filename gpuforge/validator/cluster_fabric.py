"""``fabric.pairs``: real traffic between pairs of nodes within each leaf switch (opt-in: ``--checks fabric.pairs``).

Per node group with a fabric and per leaf switch, the nodes whose ``fabric.ports`` passed pair up in a
ring (:mod:`gpuforge.validator.fabric_pairs`); each pair runs perftest's ``ib_write_bw`` and
``ib_read_lat`` over the transport (one SSH session per side, the server's started first), and,
where both nodes have GPUs, the spec's ``nccl_tests`` is on and Slurm runs the cluster,
``all_reduce_perf`` across the pair from the controller. A node's result is every pair it is in,
judged against the group's ``fabric.thresholds``. Not selected by default: the runner skips it
unless ``--checks`` names it (``registry.OPT_IN``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from gpuforge.probes.nccl_tests import parse_nccl
from gpuforge.spec import Role, Spec
from gpuforge.spec.fabric_rules import fabric_of
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.validator import fabric_pairs as fp
from gpuforge.validator.cluster import ClusterData, cluster_check, expected_partitions
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, SKIP, Outcome
from gpuforge.validator.node.checks_fabric import PORTS_DATA

PAIRS = "fabric.pairs"


class Ran(Protocol):
    rc: int
    stdout: str
    stderr: str


#: Runs a shell command on a node within a time limit (the validator's transport, sudo applied).
Runner = Callable[[Node, str, float], Ran]


def gate_fabric(spec: Spec, node: Node) -> str | None:
    return None if fabric_of(spec, node) is not None else "the node's group declares no fabric"


def limits(spec: Spec, node: Node) -> dict[str, float | None]:
    """The group's ``fabric.thresholds`` (None: not set)."""
    fabric = fabric_of(spec, node)
    th = fabric.thresholds if fabric is not None else None
    return {
        "write_bw_gbps": th.write_bw_gbps if th else None,
        "read_lat_us": th.read_lat_us if th else None,
        "nccl_busbw_gbps": th.nccl_busbw_gbps if th else None,
    }


def pair_sets(data: ClusterData) -> dict[str, list[Node]]:
    """Per leaf switch (every group's nodes on it: the switch joins them) and fabric type, or per
    group for nodes with no leaf switch, the nodes that may take part: a fabric in their group and
    ``fabric.ports`` passed."""
    sets: dict[str, list[Node]] = {}
    for n in data.nodes:
        ports = data.results.get(n.name, {}).get("fabric.ports")
        fabric = fabric_of(data.spec, n)
        if fabric is None or gate_fabric(data.spec, n) or ports is None or ports.status != PASS:
            continue
        key = f"leaf {n.leaf_switch} ({fabric.type})" if n.leaf_switch else f"group {n.group}"
        sets.setdefault(key, []).append(n)
    return sets


def _endpoint(data: ClusterData, node: Node) -> fp.Endpoint | None:
    ports = data.node_data.get(node.name, {}).get(PORTS_DATA) or {}
    return fp.endpoint(node.name, node.address or node.name, ports if isinstance(ports, dict) else {})


def _run_pair(data: ClusterData, run: Runner, server: Node, client: Node) -> fp.PairResult:
    """One pair's perftest runs: the server's session first, the client's alongside it."""
    result = fp.PairResult(server.name, client.name)
    s_ep, c_ep = _endpoint(data, server), _endpoint(data, client)
    if s_ep is None or c_ep is None:
        result.problems.append("fabric.ports chose no device on " + (server.name if s_ep is None else client.name))
        return result
    fabric = fabric_of(data.spec, server)
    seconds = fabric.thresholds.write_bw_seconds if fabric is not None else fp.WRITE_SECONDS
    writes = fabric.thresholds.write_bw_iterations if fabric is not None else None
    bound = 2 * (fp.CONNECT_WINDOW_S + seconds + 2 * fp.SETUP_S)
    with ThreadPoolExecutor(max_workers=2) as pool:
        s_future = pool.submit(run, server, fp.server_script(s_ep, seconds, fp.CONNECT_WINDOW_S, writes), bound)
        c_done = run(client, fp.client_script(c_ep, s_ep, seconds, fp.CONNECT_WINDOW_S, writes), bound)
        s_done = s_future.result()
    for side, done in ((server.name, s_done), (client.name, c_done)):
        if done.rc in (124, 255):
            result.problems.append(f"{side} not reached over SSH (exit {done.rc}): {_ssh_detail(done)}")
    if not result.problems:
        fp.judge_perftest(result, c_done.stdout, s_done.stdout, limits(data.spec, server))
    return result


def _ssh_detail(done: Ran) -> str:
    """Why a side's session failed: ssh's own words (or what its silence means), and the last
    lines the script printed before it (none: the script never started)."""
    said = " | ".join(x for x in done.stdout.strip().splitlines()[-3:])
    silent = "ssh said nothing (at LogLevel=ERROR: the node hung up after the key exchange)"
    why = " ".join(done.stderr.split()) or silent
    return f"{why[-200:]}; the script printed {said[-200:]!r}" if said else f"{why[-200:]}; the script printed nothing"


def _nccl(data: ClusterData, run: Runner, result: fp.PairResult, server: Node, client: Node) -> None:
    """all_reduce_perf across the pair (GPU nodes, ``nccl_tests`` on, a Slurm controller), judged."""
    fabric = fabric_of(data.spec, server)
    gpus = min(server.hardware.gpu_count, client.hardware.gpu_count)
    if not gpus:
        return
    controllers = nodes_with(data.spec, Role.CONTROLLER)
    if fabric is None or not fabric.nccl_tests or data.spec.slurm is None or not controllers:
        result.notes.append("NCCL not run: needs fabric.nccl_tests and a Slurm controller")
        return
    want, default = expected_partitions(data.spec, server)
    done = run(controllers[0], fp.nccl_command(server.name, client.name, gpus, default or (want[0] if want else None)),
               fp.NCCL_TIMEOUT_S + 30)  # fmt: skip
    largest = parse_nccl(done.stdout)["largest"]
    if done.rc != 0 or "__rc=0" not in done.stdout or largest is None:
        tail = " | ".join(x for x in done.stdout.strip().splitlines()[-3:] if not x.startswith("__"))
        result.problems.append(f"all_reduce_perf across the pair failed: {tail[-200:] or done.stderr[-200:]}")
        return
    result.nccl_busbw_gbps = largest["busbw"]
    low = limits(data.spec, server)["nccl_busbw_gbps"]
    if largest["wrong"]:
        result.problems.append(f"all_reduce_perf found {largest['wrong']} wrong value(s)")
    elif low is not None and largest["busbw"] < low:
        result.problems.append(f"NCCL busbw {largest['busbw']:g} GB/s, below the spec's {low:g}")


def run_pairs(data: ClusterData, run: Runner, say: Callable[[str], None]) -> None:
    """Every pair of every set, round by round (rounds across all sets at once); into ``data.gathered``."""
    sets = pair_sets(data)
    by_name = {n.name: n for nodes in sets.values() for n in nodes}
    planned = {key: fp.rounds(fp.ring([n.name for n in nodes])) for key, nodes in sets.items()}
    results: dict[str, list[fp.PairResult]] = {n: [] for n in by_name}
    depth = max((len(r) for r in planned.values()), default=0)
    for i in range(depth):
        batch = [pair for r in planned.values() if i < len(r) for pair in r[i]]
        say(f"fabric pair test, round {i + 1} of {depth}: {len(batch)} pair(s)")
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(batch)))) as pool:
            done = list(pool.map(lambda p: _run_pair(data, run, by_name[p[0]], by_name[p[1]]), batch))
        for (a, b), res in zip(batch, done, strict=True):
            if not res.problems:
                _nccl(data, run, res, by_name[a], by_name[b])
            results[a].append(res)
            results[b].append(res)
    data.gathered[PAIRS] = {"results": results, "sets": {k: [n.name for n in v] for k, v in sets.items()}}


@cluster_check(
    PAIRS,
    "job",
    CRITICAL,
    "Opt-in (--checks fabric.pairs): ib_write_bw, ib_read_lat (and NCCL) per pair of nodes within each leaf switch",
    depends_on=("fabric.ports",),
    gate=gate_fabric,
)
def fabric_pairs(data: ClusterData, node: Node) -> Outcome:
    got: dict[str, Any] = data.gathered.get(PAIRS) or {}
    if not got:
        return BLOCKED, "the pair test did not run"
    mine: list[fp.PairResult] = got["results"].get(node.name, [])
    if not mine:
        where = f"leaf {node.leaf_switch}" if node.leaf_switch else f"group {node.group}"
        return SKIP, f"no other node of {where} passed fabric.ports to pair with"
    text = "; ".join(fp.describe(r) for r in mine)
    return (FAIL if any(r.problems for r in mine) else PASS), text
