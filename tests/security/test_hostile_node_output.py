"""Review item 5: whatever a node prints, every parser of node output returns (or reports an error
for that node) in bounded time; no exception escapes to crash the run.

Hypothesis feeds hostile text (markers of gpuforge's own formats, digit strings past Python's
4,300-digit ``int()`` limit, deep JSON, control characters, huge chunk counts) to each parser of
node output: acceptance (decode_output, the judges, pod logs), validate's node-program output and
cluster probes, the probes' parsers, drift's file texts.
"""

from __future__ import annotations

import base64
import inspect
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuforge.acceptance import batch, kube_actions, parsers, slurm_actions
from gpuforge.probes import (
    containers,
    dcgm,
    fabric,
    files,
    image,
    metrics,
    mig,
    nccl_tests,
    nvidia,
    nvidia_host,
    nvidia_smi,
    packages,
    pci,
    platform,
    slurm,
    slurm_log,
    slurm_metrics,
    swap,
    systemd,
    vagrant,
)  # fmt: skip
from gpuforge.spec.bounded_read import NodeOutputError, inflate
from gpuforge.spec.cluster import Cluster
from gpuforge.validator import cluster, cluster_gpu_jobs, cluster_k8s_certs, cluster_storage, fabric_pairs, k8s_probe
from gpuforge.validator import runner as vrunner

MODULES = [containers, dcgm, fabric, files, image, metrics, mig, nccl_tests, nvidia, nvidia_host, nvidia_smi,
           packages, pci, platform, slurm, slurm_log, slurm_metrics, swap, systemd, vagrant, cluster,
           cluster_gpu_jobs, cluster_storage, cluster_k8s_certs, fabric_pairs, k8s_probe, parsers,
           slurm_actions, kube_actions]  # fmt: skip
HUGE = "9" * 5000
WORDS = ["GFACCEPT node1 1/999999 ", "GFACCEPT node1 1/1 ", "0: ", "GFSTEP nodes rc=", "GFLOG n1 begin", "| ",
         "__rc=", "rc=", "ExitCode=", HUGE, "-" + HUGE, "{", "[" * 3000, '{"results": [1, {"id": 2}]}', "=",
         "\x1b]52;c;AAAA\x07", "\x00", "NodeName=", " ", "\t", ":", "|", ",", "GPU 0:", "Xid", "1e999999"]  # fmt: skip
LINE = st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=20)), max_size=12).map("".join)
TEXT = st.lists(LINE, max_size=30).map("\n".join)


def judges(text: str) -> None:
    record = {"status": "ran", "rc": 0, "stdout": text, "stderr": text, "duration_s": 1.0}
    parsers.judge_stress("cpu", record, "cpu", 1.0)
    parsers.judge_fio(record, 1.0, 1.0)
    parsers.judge_nccl("nccl_node", record, 1.0)
    parsers.judge_dcgm(record)
    parsers.judge_health(record)


def _callers(
    name: str, fn: Callable[..., Any], params: list[inspect.Parameter], lines: bool, now: datetime
) -> list[Callable[[str], Any]]:
    """How to call one parser with a node's text (none: a parser of something else)."""
    if name == "parse_expiration":
        return [lambda t: fn(t, now)]
    if name == "parse_scontrol_records":
        return [lambda t: fn(t.splitlines(), "NodeName")]
    if len([p for p in params if p.default is inspect.Parameter.empty]) != 1:
        return []
    return [(lambda t: fn(t.splitlines())) if lines else fn]


def node_parsers() -> list[tuple[str, Callable[[str], Any]]]:
    """Every ``parse_*`` of the modules that read node output, called with text or lines."""
    found: list[tuple[str, Callable[[str], Any]]] = []
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for mod in MODULES:
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if not name.startswith("parse") or fn.__module__ != mod.__name__:
                continue
            params = list(inspect.signature(fn).parameters.values())
            first = params[0]
            lines = "list" in str(first.annotation)
            found += [(f"{mod.__name__}.{name}", call) for call in _callers(name, fn, params, lines, now)]
    found += [
        ("batch.decode_output", lambda t: batch.decode_output(t, ["node1", "node2"])),
        ("batch.decode_output(pod)", lambda t: batch.decode_output(t, ["node1"], labelled=False)),
        ("validator._last_json", vrunner._last_json),
        ("acceptance judges", judges),
    ]
    return found


PARSERS = node_parsers()
#: Parsers whose one caller reads their ValueError as "this output is unreadable" (the node-side
#: slurm metrics collector's ``_parsed``): the error is the contract, not a crash.
RAISES_FOR_ITS_CALLER = {f"gpuforge.probes.slurm_metrics.{n}" for n in ("parse_sinfo", "parse_squeue",
                                                                         "parse_scontrol_nodes")}  # fmt: skip
#: validate's certificate check reads its parser's ValueError, KeyError or TypeError as the node's error.
RAISES_FOR_ITS_CALLER.add("gpuforge.validator.cluster_k8s_certs.parse_expiration")


def test_every_parser_of_node_output_is_covered() -> None:
    assert len(PARSERS) > 50, [n for n, _ in PARSERS]


@pytest.mark.parametrize("name,parse", PARSERS, ids=[n for n, _ in PARSERS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
@example(text='{"results": [1, {"id": 2}]}')
@example(text='{"results": {"a": 1}, "data": 3}')
@example(text="[" * 100_000)
@example(text="{" + "[" * 100_000)
@example(text=f"__rc={HUGE}\nrc={HUGE}\nExitCode={HUGE}:0\nGFSTEP nodes rc={HUGE}")
@example(text=f"__rc={HUGE}\n0: GFACCEPT node1 {HUGE}/{HUGE} AAAA")
def test_no_exception_escapes_and_time_is_bounded(name: str, parse: Callable[[str], Any], text: str) -> None:
    t0 = time.monotonic()
    try:
        parse(text)
    except ValueError:
        if name not in RAISES_FOR_ITS_CALLER:
            raise
    assert time.monotonic() - t0 < 2.0, name


def test_the_reviews_reproducers() -> None:
    """2.9 MB printed that inflates to 2 GiB; a 999,999-part chunk count; a 5,000-digit exit code."""
    bomb = zlib.compress(b"\0" * (64 * 2**20), 9)  # 64 KiB of text that would inflate to 64 MiB
    with pytest.raises(NodeOutputError):
        inflate(bomb)
    blob = base64.b64encode(bomb).decode()
    parts = [blob[i : i + 4096] for i in range(0, len(blob), 4096)]
    lines = [f"0: GFACCEPT node1 {i + 1}/{len(parts)} {part}" for i, part in enumerate(parts)]
    out = batch.decode_output("\n".join(lines), ["node1"])
    assert not out.reports and out.problems
    t0 = time.monotonic()
    out = batch.decode_output("0: GFACCEPT node1 1/999999 AAAA\nGFSTEP nodes rc=" + HUGE, ["node1"])
    assert time.monotonic() - t0 < 0.5 and "incomplete" in out.problems[0] and "nodes" not in out.steps
    assert parsers.judge_stress("cpu", {"status": "ran", "rc": int("9" * 18), "stdout": HUGE}, "cpu", None)


def test_ssh_output_is_read_only_up_to_its_limit(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate's transport and apply's remote runs: a node printing 80 MiB is an error for that node."""
    from gpuforge.orchestrate import remote
    from gpuforge.spec import resolve_nodes
    from tests.validator.vhelpers import lab_spec

    spec, path = lab_spec(tmp_path)
    node = resolve_nodes(spec)[0]
    flood = ["sh", "-c", "head -c 83886080 /dev/zero"]
    monkeypatch.setattr(vrunner.SshTransport, "argv", lambda self, n: flood[:-1])
    done = vrunner.SshTransport(Cluster.of(spec, path)).run(node, flood[-1])
    assert done.rc == 1 and "more than 67,108,864 bytes" in done.stderr and done.stdout == ""
    monkeypatch.setattr(remote, "ssh_argv", lambda *a, **k: flood)
    cp = remote.run(Cluster.of(spec, path), node.name, "ignored")
    assert cp.returncode == 1 and "more than 67,108,864 bytes" in cp.stderr


def test_a_malformed_node_program_report_is_that_nodes_error() -> None:
    assert vrunner.node_results({"results": [{"id": "x", "bogus": 1}]}, {"x"}) is None
    assert vrunner.node_results({"results": [1]}, {"x"}) is None
    assert vrunner.node_results({"results": []}, {"x"}) == []
