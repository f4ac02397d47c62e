#!/usr/bin/env python3
"""The node side of an acceptance campaign: run each step's program, report what it printed.

Runs as one Slurm task per node (``srun ... python3 -c <bootstrap>``, the source carried in the
job's environment, see :mod:`gpuforge.acceptance.batch`). Standard library only, and no gpuforge
import: the file is shipped on its own (tests/acceptance/test_node_runner.py checks both).

Invariants:

* Judging is not done here: each step's exit status, duration and the tails of its output go back
  raw; the control host parses them (``gpuforge.acceptance.parsers``), so one parser, tested on
  recorded outputs, judges every node alike.
* A step whose program is missing is reported ``missing`` (the campaign could not run it), never
  as passed or failed; a step that needs GPUs on a node without any is ``skipped``.
* Steps run one after another (a burn-in measures the node alone), each under its own timeout.
* The report is one JSON document, zlib-compressed, base64 lines of at most :data:`CHUNK` characters
  with a ``GFACCEPT <node> <i>/<n>`` prefix: srun interleaves tasks' output by line, never inside one.
  It is also written to ``<dir>/result.json`` on the node when the config names a directory.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib

MARK = "GFACCEPT"
CHUNK = 900
#: Bytes kept of each stream (the end: the metrics and verdicts are printed last).
TAIL = 256 * 1024
CONFIG_ENV = "GFACCEPT_CONFIG"


def _tail(data: bytes) -> str:
    return data[-TAIL:].decode("utf-8", "replace")


def node_name() -> str:
    """Slurm's name of this node (``SLURMD_NODENAME``), else the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def expand(argv: list[str], values: dict[str, str]) -> list[str]:
    """``{gpus}`` and ``{job}`` in arguments replaced by this node's values (nothing else is)."""
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def run_step(step: dict, values: dict[str, str]) -> dict:
    """Run one step; its record (``status``: ran, missing, skipped). A step with ``scratch_in`` gets
    ``{scratch}``: a fresh 0700 directory made there (``mkdtemp``: a name nobody can plant a link at
    beforehand), removed with everything in it once the step is over."""
    name = step["name"]
    if step.get("needs_gpu") and int(values.get("gpus", "0")) < 1:
        return {"name": name, "status": "skipped", "reason": "no GPUs in this node (spec)"}
    if not step.get("scratch_in"):
        return _run(step, values)
    try:
        scratch = tempfile.mkdtemp(prefix=".gpuforge-accept-", dir=step["scratch_in"])
    except OSError as e:
        return {"name": name, "status": "missing", "reason": f"cannot make a scratch folder: {e}"}
    try:
        return _run(step, {**values, "scratch": scratch})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(step: dict, values: dict[str, str]) -> dict:
    name = step["name"]
    record: dict = {"name": name}
    argv = expand(list(step["argv"]), values)
    if shutil.which(argv[0]) is None:
        return {**record, "status": "missing", "reason": f"{argv[0]} is not installed (not on PATH)"}
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return {**record, "status": "missing", "reason": f"cannot run {argv[0]}: {e}"}
    try:
        out, err = proc.communicate(timeout=float(step.get("timeout", 600)))
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    for path in step.get("cleanup", []):
        with contextlib.suppress(OSError):
            os.unlink(expand([path], values)[0])
    record.update(status="ran", rc=rc, duration_s=round(time.monotonic() - t0, 3), stdout=_tail(out))
    record.update(stderr=_tail(err), timed_out=rc is None, argv=argv)
    return record


def encode(node: str, doc: dict) -> list[str]:
    """The report as ``GFACCEPT <node> <i>/<n> <base64 chunk>`` lines."""
    blob = base64.b64encode(zlib.compress(json.dumps(doc).encode(), 6)).decode()
    parts = [blob[i : i + CHUNK] for i in range(0, len(blob), CHUNK)] or [""]
    return [f"{MARK} {node} {i + 1}/{len(parts)} {part}" for i, part in enumerate(parts)]


def main() -> int:
    """Run the configured steps on this node and print the report; exit 0 when the report is out."""
    cfg = json.loads(base64.b64decode(os.environ[CONFIG_ENV]))
    node = node_name()
    values = {"gpus": str(int(cfg.get("gpus", {}).get(node, 0))), "job": os.environ.get("SLURM_JOB_ID", "0")}
    t0 = time.time()
    steps = [run_step(step, values) for step in cfg["steps"]]
    doc = {"schema": 1, "node": node, "hostname": socket.gethostname(), "campaign": cfg.get("campaign"),
           "started": t0, "duration_s": round(time.time() - t0, 3), "steps": steps}  # fmt: skip
    if cfg.get("keep_dir"):
        try:
            os.makedirs(cfg["keep_dir"], exist_ok=True)
            with open(os.path.join(cfg["keep_dir"], f"result-{values['job']}.json"), "w") as f:
                json.dump(doc, f)
        except OSError as e:
            doc["keep_error"] = str(e)
    sys.stdout.write("\n".join(encode(node, doc)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
