"""DCGM readings: ``dcgmi diag`` results (text table or ``-j`` JSON).

dcgm-exporter's metrics are read as any node-local exporter's: :mod:`gpuforge.probes.metrics`.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypedDict

from gpuforge.probes._common import as_bool, guarded, split_guarded
from gpuforge.probes.reading import Reading

# --------------------------------------------------------------------------- dcgmi diag


class DiagMessage(TypedDict):
    """A warning/info/error/detail attached to a diagnostic test."""

    kind: str
    text: str


class DiagTest(TypedDict):
    """One diagnostic test row."""

    category: str | None
    name: str
    result: str
    status: str
    per_gpu: dict[str, str]
    messages: list[DiagMessage]


class DcgmiDiagInfo(TypedDict):
    """What :data:`DCGM_DIAG` reads."""

    available: bool
    rc: int | None
    error: str | None
    metadata: dict[str, str]
    tests: list[DiagTest]
    counts: dict[str, int]
    overall: str | None
    messages: list[str]


#: Statuses a diagnostic test can end in (``dcgmDiagResult_t``: PASS, SKIP, WARN, FAIL, NOT_RUN).
DIAG_STATUSES: tuple[str, ...] = ("pass", "fail", "warn", "skip", "not_run")

_MESSAGE_ROW_KINDS = {"warning": "warning", "info": "info", "error": "error"}
_SECTION_RE = re.compile(r"^[|+]-{2,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+\+")
_PER_GPU_RE = re.compile(r"^GPU ?(?P<gpu>\d+)\s*:\s*(?P<status>\w[\w ]*)$")


def diag_status(result: str) -> str:
    """Normalise a result cell (``Pass``, ``Fail - All``, ``Skip``, ``Warn``, ``Not Run``)."""
    lowered = result.strip().lower()
    if lowered.startswith("not run"):
        return "not_run"
    for status in ("pass", "fail", "warn", "skip"):
        if lowered.startswith(status):
            return status
    return "unknown"


def _summarise(info: DcgmiDiagInfo) -> None:
    counts = {status: 0 for status in (*DIAG_STATUSES, "unknown")}
    for test in info["tests"]:
        counts[test["status"]] = counts.get(test["status"], 0) + 1
    info["counts"] = {status: count for status, count in counts.items() if count}
    if not info["tests"]:
        info["overall"] = None
    elif counts["fail"]:
        info["overall"] = "fail"
    elif counts["warn"]:
        info["overall"] = "warn"
    elif counts["pass"]:
        info["overall"] = "pass"
    else:
        info["overall"] = "skip"


def _empty_diag(available: bool, rc: int | None) -> DcgmiDiagInfo:
    return DcgmiDiagInfo(
        available=available,
        rc=rc,
        error=None if available else "dcgmi not found (DCGM not installed)",
        metadata={},
        tests=[],
        counts={},
        overall=None,
        messages=[],
    )


def parse_dcgmi_diag_text(lines: list[str]) -> DcgmiDiagInfo:
    """Parse the ``dcgmi diag -r N`` result table.

    Handles the DCGM 3.x layout (one row per test, ``Warning``/``Info`` rows and wrapped
    continuation rows) and the DCGM 4.x layout (per-GPU ``GPUn: Pass`` continuation rows).
    Wrapped text is re-joined from the fixed-width cells, so words split across rows survive.
    """
    out = split_guarded(lines)
    info = _empty_diag(out.available, out.rc)
    category: str | None = None
    current: DiagTest | None = None
    message: DiagMessage | None = None
    for raw in out.lines:
        line = raw.rstrip()
        section = _SECTION_RE.match(line)
        if section:
            category = section.group("name").strip()
            current, message = None, None
            continue
        if line.startswith("+") or line.startswith("|="):
            continue
        if not (line.startswith("|") and line.endswith("|") and line.count("|") >= 3):
            if line.strip():
                info["messages"].append(line.strip())
            continue
        first_bar = line.index("|", 1)
        name = line[1:first_bar].strip()
        cell = line[first_bar + 1 : -1]
        chunk = cell[1:-2] if len(cell) > 3 else cell.strip()
        text = cell.strip()
        if name in {"Diagnostic"} and text == "Result":
            continue
        if category == "Metadata" and name:
            info["metadata"][name] = text
            continue
        kind = _MESSAGE_ROW_KINDS.get(name.lower())
        if name and kind is None:
            current = DiagTest(
                category=category,
                name=name,
                result=text,
                status=diag_status(text),
                per_gpu={},
                messages=[],
            )
            info["tests"].append(current)
            message = None
            continue
        if current is None:
            if text:
                info["messages"].append(text)
            continue
        if kind is not None:
            message = DiagMessage(kind=kind, text=chunk)
            current["messages"].append(message)
            continue
        per_gpu = _PER_GPU_RE.match(text)
        if per_gpu and message is None:
            current["per_gpu"][per_gpu.group("gpu")] = diag_status(per_gpu.group("status"))
            continue
        if message is None:
            message = DiagMessage(kind="detail", text=chunk)
            current["messages"].append(message)
        else:
            message["text"] += chunk
    for test in info["tests"]:
        for msg in test["messages"]:
            msg["text"] = " ".join(msg["text"].split())
    if not info["tests"] and out.rc not in (None, 0):
        info["error"] = "; ".join(info["messages"]) or f"dcgmi exited with status {out.rc}"
    _summarise(info)
    return info


def _json_messages(result: dict[str, Any], key: str) -> list[str]:
    values = result.get(key) or []
    if not isinstance(values, list):
        values = [values]
    texts = []
    for value in values:
        if isinstance(value, dict):
            value = value.get("warning") or value.get("message") or value.get("info") or json.dumps(value)
        texts.append(str(value))
    return texts


def _diag_test(category: Any, test: dict[str, Any]) -> DiagTest:
    """One test of ``dcgmi diag -j``: its verdict (the ``test_summary``'s, else the worst entity's),
    each entity's status and the messages of its results and summary."""
    per_gpu: dict[str, str] = {}
    messages: list[DiagMessage] = []
    results = test.get("results") or []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict):
            continue
        gpu = result.get("gpu_ids", result.get("gpu_id", result.get("entity_id")))
        group = str(result.get("entity_group", "GPU"))
        status = diag_status(str(result.get("status", "")))
        if gpu is not None:
            for gpu_id in str(gpu).split(","):  # other entities (CPU) keep their group's name
                per_gpu[gpu_id.strip() if group == "GPU" else f"{group}{gpu_id.strip()}"] = status
        for kind, key in (("warning", "warnings"), ("info", "info"), ("error", "errors")):
            messages.extend(DiagMessage(kind=kind, text=text) for text in _json_messages(result, key))
    summary = test.get("test_summary")
    if isinstance(summary, dict) and summary.get("status"):
        overall = diag_status(str(summary["status"]))
        for kind, key in (("warning", "warnings"), ("info", "info")):
            known = {m["text"] for m in messages}
            texts = _json_messages(summary, key)
            messages.extend(DiagMessage(kind=kind, text=t) for t in texts if t not in known)
    else:
        statuses = set(per_gpu.values())
        overall = next((s for s in ("fail", "warn", "pass", "skip", "not_run") if s in statuses), "unknown")
    name = str(test.get("name") or test.get("test_name") or "unknown")
    return DiagTest(category=category, name=name, result=overall, status=overall, per_gpu=per_gpu, messages=messages)


def parse_dcgmi_diag_json(lines: list[str]) -> DcgmiDiagInfo:
    """Parse ``dcgmi diag -r N -j``.

    DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
    "results": [{"gpu_ids"|"gpu_id", "status", "warnings", "info"}]}]}], "version"}}``.
    DCGM 4.x (dcgmi/Diag.cpp ``HelperJsonBuildOutput``; DCGM's testing/python3/dcgm_diag_schema.json):
    root ``"DCGM Diagnostic"``; a result per entity (``entity_group`` "GPU"/"CPU"/..., ``entity_id``)
    with ``warnings`` as objects (``warning``, ``error_id``, ...); a per-test ``test_summary`` whose
    status is the test's verdict (it also holds the errors no entity owns); ``metadata``
    (``version``, ``Driver Version Detected``) and ``entity_groups`` at the top level.
    """
    out = split_guarded(lines)
    info = _empty_diag(out.available, out.rc)
    start = next((i for i, line in enumerate(out.lines) if line.lstrip().startswith("{")), None)
    if start is None:
        info["messages"] = [line.strip() for line in out.lines if line.strip()]
        if out.rc not in (None, 0) or out.available:
            info["error"] = "; ".join(info["messages"]) or "no JSON output from dcgmi"
        _summarise(info)
        return info
    info["messages"] = [line.strip() for line in out.lines[:start] if line.strip()]
    try:
        data = json.loads("\n".join(out.lines[start:]))
    except ValueError as exc:
        info["error"] = f"invalid JSON from dcgmi: {exc}"
        _summarise(info)
        return info
    root = data.get("DCGM GPU Diagnostic") or data.get("DCGM Diagnostic") or data if isinstance(data, dict) else {}
    if not isinstance(root, dict):
        root = {}
    top_metadata = data.get("metadata") if isinstance(data, dict) else None
    for source in (root, top_metadata if isinstance(top_metadata, dict) else {}):
        for key in ("version", "driver_version_detected", "Driver Version Detected"):
            if key in source and isinstance(source[key], str):
                info["metadata"][key] = source[key]
    runtime_error = root.get("runtime_error") or (data.get("runtime_error") if isinstance(data, dict) else None)
    if runtime_error:
        info["error"] = str(runtime_error)
    for category in root.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if isinstance(test, dict):
                info["tests"].append(_diag_test(category.get("category"), test))
    _summarise(info)
    return info


def parse_dcgmi_diag(lines: list[str]) -> DcgmiDiagInfo:
    """Parse ``dcgmi diag`` output in either text or JSON form."""
    out = split_guarded(lines)
    if out.timeout is not None:
        info = _empty_diag(out.available, out.rc)
        info["error"] = f"did not finish within {out.timeout} s"
        return info
    if any(line.lstrip().startswith("{") for line in lines):
        return parse_dcgmi_diag_json(lines)
    return parse_dcgmi_diag_text(lines)


# --------------------------------------------------------------------------- reading

DIAG_LEVELS = ("1", "2", "3", "4")
#: Seconds each level may take (dcgmi diag: seconds / about 2 min / about 15 min / longer), with margin.
DIAG_TIMEOUT_S = {1: 180.0, 2: 900.0, 3: 3600.0, 4: 7200.0}


def diag_command(level: int | str = 1, json_output: bool | str = False) -> str:
    """``dcgmi diag -r LEVEL`` (``-j``: JSON); level 1 is quick, 3 and 4 take many minutes."""
    if str(level).strip() not in DIAG_LEVELS:
        raise ValueError(f"dcgmi diag level must be 1-4, not {level!r}")
    return guarded("dcgmi", f"dcgmi diag -r {int(level)}{' -j' if as_bool(json_output) else ''}")


def _diag_timeout(level: int | str = 1, json_output: bool | str = False) -> float:
    return DIAG_TIMEOUT_S.get(int(str(level).strip() or 1), DIAG_TIMEOUT_S[4])


DCGM_DIAG: Reading[DcgmiDiagInfo] = Reading("dcgm.diag", diag_command, parse_dcgmi_diag, timeout_s=_diag_timeout)
