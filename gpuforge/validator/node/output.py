"""The results for people (table), for node-exporter (textfile) and atomic writes."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Sequence

from gpuforge.validator.node.base import DEFAULT_CONFIG, FAIL, PASS, SKIP, STATUSES, Config
from gpuforge.validator.node.framework import Result


def prometheus_text(node: str, results: Sequence[Result], now: float | None = None) -> str:
    """node-exporter textfile: ``gpuforge_check_status{node,check,layer,severity}`` 1 passed, 0 not."""

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    out = [
        "# HELP gpuforge_check_status 1 when a gpuforge check passed, 0 when it failed or was blocked "
        "(skipped checks are not exported).",
        "# TYPE gpuforge_check_status gauge",
    ]
    for r in results:
        if r.status == SKIP:
            continue
        labels = f'node="{esc(node)}",check="{esc(r.id)}",layer="{esc(r.layer)}",severity="{esc(r.severity)}"'
        out.append(f"gpuforge_check_status{{{labels}}} {1 if r.status == PASS else 0}")
    out += ["# HELP gpuforge_checks Checks by result.", "# TYPE gpuforge_checks gauge"]
    for status in STATUSES:
        count = sum(1 for r in results if r.status == status)
        out.append(f'gpuforge_checks{{node="{esc(node)}",status="{status}"}} {count}')
    out += [
        "# HELP gpuforge_health_last_run_timestamp_seconds When the checks last ran.",
        "# TYPE gpuforge_health_last_run_timestamp_seconds gauge",
        f'gpuforge_health_last_run_timestamp_seconds{{node="{esc(node)}"}} {time.time() if now is None else now:.3f}',
    ]
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` so that readers (node-exporter) never see half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def format_results(node: str, results: Sequence[Result]) -> str:
    """Plain text, one line per check."""
    lines = []
    for r in results:
        lines.append(f"{r.status.upper():8} {r.id:28} {r.message}")
    failed = sum(1 for r in results if r.status == FAIL)
    lines.append(f"{node}: {len(results)} checks, {failed} failed")
    return "\n".join(lines)


def load_config(path: str | None, inline_b64: str | None = None) -> Config:
    """The node config: inline (base64 JSON) or a file."""
    if inline_b64:
        data = json.loads(base64.b64decode(inline_b64).decode())
    else:
        with open(path or DEFAULT_CONFIG, encoding="utf-8") as f:
            data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("the config is not a JSON object")
    return data
