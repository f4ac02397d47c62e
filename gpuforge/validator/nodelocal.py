#!/usr/bin/env python3
"""gpuforge node health check: the checks that run ON a node.

Built with the probes it imports into one file (``gpuforge.render.node_program``), the Slurm
deploy installs it as ``/usr/local/sbin/gpuforge-health`` with its
configuration in ``/etc/gpuforge/health.json`` (written from the cluster spec by
``gpuforge.render.health.health_config``); ``gpuforge validate`` sends the same file
the same program over SSH (``python3 - --validate --json``), so a node answers both alike.

Rules:

* Python standard library, ``gpuforge.probes`` and ``gpuforge.spec.xid_catalog`` only (nodes
  have no gpuforge installed; the program carries the modules it uses, see
  tests/validator/test_node_program.py).
* A check either runs and passes or fails, is skipped with a reason (it does not apply to
  this node), or is blocked (a check it depends on did not pass). Nothing passes that did
  not run.
* What a check reads is a reading of ``gpuforge.probes`` (``validator.node.inputs``): the
  deploy facts' own command and parser, tested against the facts' recorded fixtures.
* In Slurm mode (``--slurm``, or when slurmd runs it as HealthCheckProgram) a node with a
  failing critical check is drained with a ``gpuforge: health: ...`` reason, and a node drained
  with that tag is resumed once everything passes. A node drained by anyone else (an operator,
  or gpuforge's own rolling apply) is left alone.

Exit status: 0 all passed (skips allowed), 1 a check failed, 2 could not run (bad config).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Sequence

from gpuforge.validator.node.base import DEFAULT_CONFIG, FAIL, SCHEMA_VERSION
from gpuforge.validator.node.drain import node_name, parent_is_slurmd, slurm_update
from gpuforge.validator.node.execute import run_node_checks
from gpuforge.validator.node.output import format_results, load_config, prometheus_text, write_atomic


def main(argv: Sequence[str] | None = None) -> int:
    """``gpuforge-health``: run the node checks, report, and (Slurm mode) drain or resume."""
    p = argparse.ArgumentParser(prog="gpuforge-health", description="gpuforge node health checks")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"JSON config (default {DEFAULT_CONFIG})")
    p.add_argument("--config-b64", help=argparse.SUPPRESS)
    p.add_argument("--slurm", action="store_true", help="drain this node on failure, resume it when healthy")
    p.add_argument("--no-slurm", action="store_true", help="never drain or resume (even under slurmd)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--validate", action="store_true", help="also run the slow checks (gpuforge validate)")
    p.add_argument("--checks", help="comma-separated check ids (their dependencies run too)")
    p.add_argument("--prom", help="write a node-exporter textfile here")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.config_b64)
    except (OSError, ValueError) as e:
        print(f"gpuforge-health: cannot read config {args.config}: {e}", file=sys.stderr)
        return 2
    ids = [i.strip() for i in args.checks.split(",") if i.strip()] if args.checks else None
    t0 = time.monotonic()
    results, ctx = run_node_checks(cfg, ids, health_only=not args.validate)
    node = node_name(cfg)
    slurm_mode = (args.slurm or parent_is_slurmd()) and not args.no_slurm
    action = slurm_update(node, results) if slurm_mode else None
    if args.prom:
        try:
            write_atomic(args.prom, prometheus_text(node, results))
        except OSError as e:
            print(f"gpuforge-health: cannot write {args.prom}: {e}", file=sys.stderr)
    failed = any(r.status == FAIL for r in results)
    if args.json:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "node": node,
            "hostname": socket.gethostname(),
            "ok": not failed,
            "duration_s": round(time.monotonic() - t0, 3),
            "results": [r.to_dict() for r in results],
            "data": ctx.data,
            "slurm": action,
        }
        print(json.dumps(doc))
    else:
        print(format_results(node, results))
        if action:
            print(f"slurm: {action}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
