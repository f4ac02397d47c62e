"""Pure parsers and judges of what the node runner brought back (formats: :data:`.tools.SOURCES`).

A judge turns one step record (exit status, duration, output tails) into a :class:`StepResult`:
``pass``, ``fail`` (the node is at fault: drained), ``error`` (the step could not run: a missing
program, an output nobody can read; never drained, never passed) or ``skip`` (does not apply).
Every metric is "higher is better", so the peer comparison looks only below the median.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuforge.probes.dcgm import parse_dcgmi_diag
from gpuforge.probes.nccl_tests import parse_nccl
from gpuforge.spec.bounded_read import NodeOutputError, bounded_json

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
STATUSES = (PASS, FAIL, ERROR, SKIP)


@dataclass
class StepResult:
    """One step on one node (or one group, for the steps that span nodes)."""

    step: str
    status: str
    message: str
    metrics: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "status": self.status, "message": self.message, "metrics": self.metrics,
                "duration_s": self.duration_s}  # fmt: skip


# --------------------------------------------------------------------------- stress-ng

_STRESS_ROW = re.compile(
    r"^stress-ng: (?:metrc|info):\s+\[\d+\]\s+(?P<name>[a-z][a-z0-9_-]*)\s+(?P<ops>\d+)\s+(?P<real>[\d.]+)\s+"
    r"(?P<usr>[\d.]+)\s+(?P<sys>[\d.]+)\s+(?P<rate_real>[\d.]+)\s+(?P<rate_cpu>[\d.]+)\s*$"
)


def parse_stress_ng(text: str) -> dict[str, Any]:
    """``--metrics-brief`` rows per stressor, whether the run said it completed, and its fail lines."""
    stressors: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _STRESS_ROW.match(line.strip())
        if m:
            stressors[m["name"]] = {
                "bogo_ops": float(m["ops"]), "real_time_s": float(m["real"]), "usr_s": float(m["usr"]),
                "sys_s": float(m["sys"]), "bogo_ops_per_s": float(m["rate_real"]),
                "bogo_ops_per_s_cpu": float(m["rate_cpu"]),
            }  # fmt: skip
    fails = [line.strip() for line in text.splitlines() if re.match(r"^stress-ng: (fail|error):", line.strip())]
    return {"stressors": stressors, "completed": "successful run completed" in text, "fail_lines": fails}


STRESS_EXIT = {1: "an error (bad options or a fatal resource issue)", 2: "one or more stressors failed",
               3: "a stressor could not start (no memory, no space)", 4: "a stressor is not implemented here",
               5: "a stressor was killed by a signal", 6: "a stressor exited unexpectedly",
               7: "the bogo ops figures are untrustworthy (OOM kill?)"}  # fmt: skip


def judge_stress(step: str, record: dict[str, Any], stressor: str, minimum: float | None) -> StepResult:
    """Exit 0 with a metrics row for ``stressor``; at least ``minimum`` bogo ops/s (real time)."""
    early = _early(step, record)
    if early:
        return early
    parsed = parse_stress_ng(str(record.get("stderr", "")) + "\n" + str(record.get("stdout", "")))
    row = parsed["stressors"].get(stressor)
    rc = record.get("rc")
    took = float(record.get("duration_s") or 0.0)
    if rc != 0:
        why = STRESS_EXIT.get(rc, f"exit {rc}") if isinstance(rc, int) else "no exit status"
        detail = "; ".join(parsed["fail_lines"][:2])
        return StepResult(step, FAIL, f"stress-ng {stressor}: {why}" + (f": {detail}" if detail else ""), {}, took)
    if row is None:
        return StepResult(step, ERROR, f"stress-ng printed no {stressor} metrics row (--metrics-brief)", {}, took)
    rate = row["bogo_ops_per_s"]
    metrics = {"bogo_ops_per_s": rate}
    if minimum is not None and rate < minimum:
        return StepResult(step, FAIL, f"{rate:g} bogo ops/s, below the minimum {minimum:g}", metrics, took)
    return StepResult(step, PASS, f"{stressor}: {rate:g} bogo ops/s over {row['real_time_s']:g} s", metrics, took)


# --------------------------------------------------------------------------- fio


def parse_fio(stdout: str) -> dict[str, Any]:
    """fio's JSON (text before its first ``{`` ignored): per direction IOPS, MiB/s, mean latency (us)."""
    start = stdout.find("{")
    if start < 0:
        return {"error": "no JSON from fio"}
    try:
        doc = json.loads(stdout[start:])
        job = doc["jobs"][0]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return {"error": f"fio's JSON cannot be read: {e}"}
    out: dict[str, Any] = {"error": None, "job_error": int(job.get("error") or 0), "version": doc.get("fio version")}
    for direction in ("read", "write"):
        d = job.get(direction) or {}
        if d.get("io_bytes"):
            out[direction] = {"iops": float(d["iops"]), "mib_s": float(d["bw_bytes"]) / 2**20,
                              "lat_mean_us": float((d.get("lat_ns") or {}).get("mean", 0.0)) / 1000}  # fmt: skip
    return out


def judge_fio(record: dict[str, Any], min_read_iops: float | None, min_write_iops: float | None) -> StepResult:
    """fio exits 0 with a job without error; read/write IOPS at least their minimums."""
    early = _early("disk", record)
    if early:
        return early
    took = float(record.get("duration_s") or 0.0)
    parsed = parse_fio(str(record.get("stdout", "")))
    if parsed["error"] or record.get("rc") != 0:
        said = str(record.get("stderr", "")) + "\n" + (str(record.get("stdout", "")) if parsed["error"] else "")
        tail = " ".join(said.split())[-200:]
        return StepResult("disk", FAIL, f"fio exit {record.get('rc')}: {tail or parsed['error']}", {}, took)
    if parsed["job_error"]:
        return StepResult("disk", FAIL, f"fio job error {parsed['job_error']}", {}, took)
    metrics: dict[str, float] = {}
    words = []
    for direction, minimum in (("read", min_read_iops), ("write", min_write_iops)):
        if direction in parsed:
            d = parsed[direction]
            metrics[f"{direction}_iops"] = round(d["iops"], 1)
            metrics[f"{direction}_mib_s"] = round(d["mib_s"], 2)
            words.append(f"{direction} {d['iops']:.0f} IOPS {d['mib_s']:.1f} MiB/s")
            if minimum is not None and d["iops"] < minimum:
                return StepResult("disk", FAIL, f"{direction} {d['iops']:.0f} IOPS, below {minimum:g}", metrics, took)
    return StepResult("disk", PASS, ", ".join(words) or "fio ran (no I/O counted)", metrics, took)


# --------------------------------------------------------------------------- nccl-tests

# The table is read by gpuforge.probes.nccl_tests (the validator's fabric pair test reads it too).


def judge_nccl(step: str, record: dict[str, Any], minimum: float | None) -> StepResult:
    """Exit 0, rows printed, no wrong values; bus bandwidth at the largest size at least ``minimum``."""
    early = _early(step, record)
    if early:
        return early
    took = float(record.get("duration_s") or 0.0)
    text = str(record.get("stdout", "")) + "\n" + str(record.get("stderr", ""))
    parsed = parse_nccl(text)
    largest = parsed["largest"]
    if record.get("rc") != 0 or largest is None:
        tail = " | ".join(x.strip() for x in text.strip().splitlines()[-2:])
        return StepResult(step, FAIL, f"all_reduce_perf exit {record.get('rc')}: {tail or 'no output'}", {}, took)
    metrics = {"busbw_gbps": largest["busbw"]}
    if parsed["avg_busbw"] is not None:
        metrics["avg_busbw_gbps"] = parsed["avg_busbw"]
    wrong = sum(r["wrong"] for r in parsed["rows"]) + (parsed["out_of_bounds"] or 0)
    if wrong:
        return StepResult(step, FAIL, f"all_reduce_perf found {wrong} wrong value(s)", metrics, took)
    if minimum is not None and largest["busbw"] < minimum:
        return StepResult(step, FAIL, f"busbw {largest['busbw']:g} GB/s at {largest['size']} B, below {minimum:g}",
                          metrics, took)  # fmt: skip
    return StepResult(step, PASS, f"busbw {largest['busbw']:g} GB/s at {largest['size']} B", metrics, took)


# --------------------------------------------------------------------------- dcgm, health


def judge_dcgm(record: dict[str, Any]) -> StepResult:
    """Every diagnostic test passed or was skipped (``gpuforge.probes.dcgm`` reads text or JSON)."""
    early = _early("dcgm", record)
    if early:
        return early
    took = float(record.get("duration_s") or 0.0)
    lines = [*str(record.get("stdout", "")).splitlines(), f"__rc={record.get('rc')}"]
    info = parse_dcgmi_diag(lines)
    failed = [t for t in info["tests"] if t["status"] in ("fail", "warn")]
    if info["error"]:
        return StepResult("dcgm", FAIL, f"dcgmi diag: {info['error']}", {}, took)
    if failed:
        words = [f"{t['name']}: {t['status']}" + (f" ({t['messages'][0]['text']})" if t["messages"] else "")
                 for t in failed]  # fmt: skip
        return StepResult("dcgm", FAIL, "dcgmi diag: " + "; ".join(words)[:300], {}, took)
    if not info["tests"]:
        return StepResult("dcgm", ERROR, "dcgmi diag printed no test result", {}, took)
    return StepResult("dcgm", PASS, f"dcgmi diag: {len(info['tests'])} test(s) passed or skipped", {}, took)


def judge_health(record: dict[str, Any]) -> StepResult:
    """gpuforge-health's JSON: every check passed or was skipped; the failed ones named."""
    early = _early("health", record)
    if early:
        return early
    took = float(record.get("duration_s") or 0.0)
    doc = next((_json(line) for line in reversed(str(record.get("stdout", "")).splitlines()) if line.startswith("{")),
               None)  # fmt: skip
    entries = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(isinstance(r, dict) for r in entries):
        return StepResult("health", ERROR, f"gpuforge-health printed no report (exit {record.get('rc')})", {}, took)
    failed = [r for r in entries if r.get("status") == "fail"]
    if failed:
        ids = ", ".join(str(r.get("id")) for r in failed)
        first = " ".join(str(failed[0].get("message")).split())
        return StepResult("health", FAIL, f"{ids} failed ({failed[0].get('id')}: {first})"[:300], {}, took)
    return StepResult("health", PASS, f"{len(entries)} node check(s), none failed", {}, took)


def _json(line: str) -> Any:
    try:
        return bounded_json(line)
    except NodeOutputError:
        return None


def _early(step: str, record: dict[str, Any]) -> StepResult | None:
    """The outcome of a step that did not run, or ran out of time."""
    status = record.get("status")
    if status == "skipped":
        return StepResult(step, SKIP, str(record.get("reason", "does not apply")))
    if status == "missing":
        return StepResult(step, ERROR, str(record.get("reason", "the program is missing")))
    if status != "ran":
        return StepResult(step, ERROR, f"no record of the step ({status})")
    if record.get("timed_out"):
        return StepResult(step, FAIL, "did not finish in time (killed)", {}, float(record.get("duration_s") or 0.0))
    return None
