"""Scale benchmark: check and render a 1,024-node 8xH100 Slurm cluster.

The spec is built in memory: 1,024 GPU nodes in four groups (one of them MIG-partitioned),
64 leaf switches under two spines, controllers, accounting, login and monitoring nodes,
partitions, QOS and fair-share accounts. It is written out as YAML text and then

* ``parse_spec`` (what ``gpuforge check`` does: YAML, pydantic, cross-field rules), and
* ``render_cluster`` (every node's files, all layers, secrets redacted)

are timed, with the peak memory of each. Targets: under 1 s together, under 150 MB.

    python bench/render_scale.py [--nodes 1024] [--profile] [--repeat 3]

``--profile`` prints the top of a cProfile of the slower step(s) over target.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gpuforge.render import render_cluster
from gpuforge.spec import parse_spec, resolve_nodes

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 1.0
TARGET_MB = 150.0
NODES_PER_LEAF = 16

T = TypeVar("T")


def _gpu_groups(gpu_nodes: int, width: int) -> list[dict[str, Any]]:
    """Four HGX groups of equal size, each leaf switch serving NODES_PER_LEAF consecutive nodes."""
    per_group = gpu_nodes // 4
    hgx = {
        "gpu": {"model": "H100-80GB", "count": 8},
        "nvswitch": True,
        "sockets": 2,
        "cores_per_socket": 56,
        "threads_per_core": 2,
        "real_memory_mb": 2000000,
    }
    groups = []
    for gi, name in enumerate(["train-a", "train-b", "train-c", "infer"]):
        first = gi * per_group + 1
        mapping = {}
        for leaf in range(per_group // NODES_PER_LEAF):
            lo = first + leaf * NODES_PER_LEAF
            hi = lo + NODES_PER_LEAF - 1
            index = (first - 1) // NODES_PER_LEAF + leaf + 1
            mapping[f"leaf{index:02d}"] = f"gpu[{lo:0{width}d}-{hi:0{width}d}]"
        group: dict[str, Any] = {
            "name": name,
            "hosts": f"gpu[{first:0{width}d}-{first + per_group - 1:0{width}d}]",
            "address_start": f"10.{1 + gi}.0.1",
            "roles": ["compute"],
            "hardware": dict(hgx),
            "leaf_switch": mapping,
        }
        if name == "infer":
            group["mig_config"] = "inference"
        groups.append(group)
    return groups


def _accounting() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """QOS levels with preemption, and 2 + 20 accounts with 5 users each."""
    qos = [
        {"name": "scavenger", "priority": 0},
        {"name": "low", "priority": 10, "max_wall": "7-00:00:00"},
        {"name": "high", "priority": 1000, "preempt": ["low", "scavenger"], "grp_gpus": 2048},
        {"name": "urgent", "priority": 5000, "preempt": ["low", "scavenger", "high"], "max_gpus_per_user": 64},
        {"name": "infer", "priority": 500, "preempt": ["scavenger"]},
    ]
    accounts: list[dict[str, Any]] = [
        {"name": "research", "fairshare": 60, "qos": ["normal", "low", "high"]},
        {"name": "platform", "fairshare": 40, "qos": ["normal", "high", "urgent"], "users": ["ops1", "ops2"]},
    ]
    for i in range(1, 21):
        accounts.append(
            {
                "name": f"team{i:02d}",
                "parent": "research",
                "fairshare": 3,
                "users": [f"user{i:02d}{j}" for j in range(5)],
                "qos": ["normal", "low", "scavenger"],
                "default_qos": "normal",
            }
        )
    return qos, accounts


def build_spec(gpu_nodes: int = 1024) -> dict[str, Any]:
    """A large but realistic Slurm spec as plain data."""
    assert gpu_nodes % (4 * NODES_PER_LEAF) == 0, "gpu_nodes must be a multiple of 64"
    width = max(4, len(str(gpu_nodes)))
    leaves = gpu_nodes // NODES_PER_LEAF
    groups: list[dict[str, Any]] = [
        {"name": "ctl", "hosts": "ctl[01-02]", "address_start": "10.0.0.10", "roles": ["controller"]},
        {"name": "db", "hosts": "db01", "address_start": "10.0.0.20", "roles": ["accounting-db"]},
        {"name": "login", "hosts": "login[01-04]", "address_start": "10.0.0.30", "roles": ["login"]},
        {"name": "mon", "hosts": "mon01", "address_start": "10.0.0.40", "roles": ["monitoring"]},
        *_gpu_groups(gpu_nodes, width),
    ]
    switches: list[dict[str, Any]] = [{"name": "core"}, {"name": "spine1", "parent": "core"}]
    switches.append({"name": "spine2", "parent": "core"})
    switches += [
        {"name": f"leaf{i:02d}", "parent": "spine1" if i <= leaves // 2 else "spine2"} for i in range(1, leaves + 1)
    ]
    qos, accounts = _accounting()
    return {
        "cluster": {"name": "scale", "scheduler": "slurm", "os": "ubuntu24.04", "domain": "scale.example.org"},
        "sources": {"mode": "mirror", "apt_proxy": "http://10.0.0.5:3142"},
        "versions": {"driver": {"version": "550.163.01", "flavor": "open", "source": "nvidia"}},
        "node_groups": groups,
        "topology": {"switches": switches},
        "mig": {
            "configs": {
                "inference": [
                    {"devices": [0, 1, 2, 3], "mig_devices": {"1g.10gb": 7}},
                    {"devices": [4, 5, 6, 7], "mig_devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
                ]
            }
        },
        "slurm": {
            "config_mode": "configless",
            "partitions": [
                {"name": "train", "nodes": "train-a,train-b,train-c", "default": True, "max_time": "2-00:00:00"},
                {"name": "train-a", "nodes": "train-a", "max_time": "7-00:00:00", "qos": "high"},
                {"name": "infer", "nodes": "infer", "max_time": "12:00:00", "qos": "infer"},
                {"name": "debug", "nodes": f"gpu[{1:0{width}d}-{8:0{width}d}]", "max_time": "30:00", "max_nodes": 2},
                {"name": "scavenger", "nodes": "train-a,train-b,train-c,infer", "qos": "scavenger"},
                {"name": "urgent", "nodes": "train-a,train-b,train-c", "qos": "urgent", "priority_tier": 100},
            ],
            "qos": qos,
            "accounts": accounts,
        },
        "dcgm": {"enabled": True, "exporter": True},
        "monitoring": {"prometheus": True},
    }


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def peak_mb(fn: Callable[[], object]) -> float:
    """Peak memory Python allocates while ``fn`` runs (tracemalloc), in MB."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def mark(ok: bool) -> str:
    return "ok" if ok else "OVER TARGET"


def profile(label: str, fn: Callable[[], object], top: int = 25) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(r"gpuforge|jinja2|yaml|ipaddress", top)
    stats.sort_stats("tottime").print_stats(top // 2)
    print(f"\n--- cProfile: {label} (by cumulative time, gpuforge/jinja2/yaml/ipaddress; then by own time)")
    for line in out.getvalue().splitlines():
        if line.strip() and not line.startswith(("   Ordered by", "   List reduced")):
            print(line.replace(str(REPO) + "/", "").replace(sys.prefix + "/", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024, help="GPU nodes (multiple of 64)")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs; the best is reported")
    parser.add_argument("--profile", action="store_true", help="cProfile the steps that are over target")
    args = parser.parse_args(argv)

    text = yaml.safe_dump(build_spec(args.nodes), sort_keys=False)
    check_times, render_times = [], []
    spec = None
    rendered: dict[str, Any] = {}
    for _ in range(max(1, args.repeat)):
        spec, t_check = timed(lambda: parse_spec(text, "scale.yaml"))
        rendered, t_render = timed(lambda s=spec: render_cluster(s))
        check_times.append(t_check)
        render_times.append(t_render)
        if t_check + t_render > 5 * TARGET_SECONDS:
            break  # far over target: more runs only take longer
    assert spec is not None
    t_check, t_render = min(check_times), min(render_times)
    total = t_check + t_render
    # Max RSS before tracemalloc runs (its own bookkeeping would count otherwise).
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    m_check = peak_mb(lambda: parse_spec(text, "scale.yaml"))
    m_render = peak_mb(lambda: render_cluster(spec))

    nodes = resolve_nodes(spec)
    files = sum(len(fs) for fs in rendered.values())
    size = sum(len(f.data) for fs in rendered.values() for f in fs)
    print(
        f"spec: {len(nodes)} nodes ({args.nodes} GPU nodes x 8 H100), {len(spec.topology.switches)} switches, "
        f"{len(spec.slurm.partitions) if spec.slurm else 0} partitions; YAML {len(text) / 1e3:.0f} kB"
    )
    print(f"rendered: {files} files, {size / 1e6:.1f} MB")
    print(f"{'step':<28}{'seconds':>10}{'target':>10}{'peak MB':>10}{'target':>10}")
    print(f"{'parse_spec (check)':<28}{t_check:>10.3f}{'':>10}{m_check:>10.1f}")
    print(f"{'render_cluster':<28}{t_render:>10.3f}{'':>10}{m_render:>10.1f}")
    print(
        f"{'check + render':<28}{total:>10.3f}{'< ' + str(TARGET_SECONDS):>10}{max(m_check, m_render):>10.1f}"
        f"{'< ' + str(int(TARGET_MB)):>10}"
    )
    print(f"process max RSS: {maxrss_mb:.0f} MB (interpreter and imports included)")
    time_ok = total < TARGET_SECONDS
    mem_ok = max(m_check, m_render) < TARGET_MB and maxrss_mb < TARGET_MB
    print(f"time: {mark(time_ok)}; memory: {mark(mem_ok)}")
    if args.profile:
        if t_check > TARGET_SECONDS / 4 or not time_ok:
            profile("parse_spec", lambda: parse_spec(text, "scale.yaml"))
        if not time_ok:
            profile("render_cluster", lambda: render_cluster(spec))
    return 0 if time_ok and mem_ok else 1


if __name__ == "__main__":
    sys.exit(main())
