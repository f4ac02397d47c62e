"""nccl-tests output (``all_reduce_perf`` and its siblings): the result table, read anywhere (standard library only).

The acceptance campaign's judges (``gpuforge.acceptance.parsers``) and the validator's fabric pair
test read the same table with this one parser. Format: NVIDIA/nccl-tests ``src/common.cu`` (rows
``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``, out-of-place then
in-place, GB/s; ``# Out of bounds values : %d`` and ``# Avg bus bandwidth    : %g``).
"""

from __future__ import annotations

import re
from typing import Any

_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+|N/A)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+"
                       r"([\d.]+|N/A)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")  # fmt: skip


def parse_nccl(text: str) -> dict[str, Any]:
    """all_reduce_perf's table: rows (size, out-of-place algbw/busbw, #wrong), the average and bounds lines."""
    rows = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m and not line.lstrip().startswith("#"):
            wrong = sum(int(w) if w.isdigit() else 1 for w in (m[6], m[10]) if w != "N/A")
            rows.append({"size": int(m[1]), "algbw": float(m[4]), "busbw": float(m[5]),
                         "busbw_in_place": float(m[9]), "wrong": wrong})  # fmt: skip
    avg = re.search(r"^# Avg bus bandwidth\s*:\s*([\d.eE+-]+)", text, re.M)
    bounds = re.search(r"^# Out of bounds values\s*:\s*(\d+)", text, re.M)
    return {
        "rows": rows,
        "avg_busbw": float(avg[1]) if avg else None,
        "out_of_bounds": int(bounds[1]) if bounds else None,
        "largest": rows[-1] if rows else None,
    }
