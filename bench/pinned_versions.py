"""Every pinned default and the examples' driver pins, with upstream's end of support and newest release.

Reads only gpuforge's cited tables (``gpuforge.spec.nvidia_releases``) and the spec model's defaults:
no network. Keeping current is: update the table from its cited pages, run this, bump what it flags.

    python bench/pinned_versions.py [--today YYYY-MM-DD] [--json] [--strict]

Columns: the field, its pin, its end of support as upstream publishes it, the newest upstream release
gpuforge's table knows, and a verdict: ``ok``, ``behind`` (a newer release exists), ``ENDED`` (past
its end of support), ``no date`` (the cited sources give none) or ``OUTSIDE`` (a Kubernetes add-on pin
whose cited window, ``gpuforge.spec.support_windows``, leaves out the default Kubernetes while another
release in the table covers it; Helm 3 past its last security fix) or ``none yet`` (no release in the
table covers the default Kubernetes: shown, nothing to move to). ``--strict`` exits 1 when a pin has
ended or is outside; otherwise 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import yaml

from gpuforge.spec import nvidia_releases as rel
from gpuforge.spec import support_windows as win
from gpuforge.spec.k8s_upstream import CNI_DEFAULT_VERSIONS, QUEUE_DEFAULT_VERSIONS
from gpuforge.spec.model import BatchQueue, Versions
from gpuforge.spec.network_operator import NETWORK_OPERATOR_DEFAULT_VERSION
from gpuforge.spec.nvidia_support import end_of_life_date, month_text

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("slurm-h100", "k8s-gpu-operator")
#: Said of pins whose sources (the repositories' READMEs and tags, the GPU Operator matrix) give no date.
NO_DATE = "no end-of-support date in the sources gpuforge cites"


@dataclass(frozen=True)
class Row:
    field: str
    pinned: str
    end_of_support: str
    newest: str
    verdict: str
    source: str


def _newest(field: str) -> tuple[str, str]:
    cur = rel.CURRENT.get(field)
    return (cur.version, rel.SOURCES[cur.cite].where) if cur else ("-", "-")


def _verdict(ended: bool | None, pinned: str, newest: str) -> str:
    if ended:
        return "ENDED"
    if newest not in ("-", pinned) and not pinned.startswith(newest + "."):
        return "behind"
    return "no date" if ended is None else "ok"


def driver_row(where: str, version: str, today: date) -> Row:
    branch = rel.BRANCHES[int(version.split(".")[0])]
    eol = end_of_life_date(branch)
    label = (
        f"{month_text(branch.end_of_life)} ({rel.DESIGNATIONS[branch.designation]})" if branch.end_of_life else "none"
    )
    newest, _ = _newest("driver")
    ended = None if eol is None else eol < today
    return Row(f"{where}: versions.driver", version, label, newest, _verdict(ended, version, newest),
               rel.SOURCES[branch.cite].where)  # fmt: skip


def kubernetes_row(version: str, today: date) -> Row:
    minor = int(version.split(".")[1])
    eol = rel.KUBERNETES_EOL.get(minor)
    oldest = min(rel.KUBERNETES_EOL)
    ended: bool | None
    if eol is None and minor < oldest:  # older than every minor with a published date: ended before it
        label, ended = f"before {rel.KUBERNETES_EOL[oldest]} (1.{oldest}'s end of life)", True
    else:
        label, ended = (eol or "none"), (None if eol is None else date.fromisoformat(eol) < today)
    newest, _ = _newest("kubernetes")
    src = rel.SOURCES["kubernetes-releases"].where
    return Row("versions.kubernetes", version, label, newest, _verdict(ended, version, newest), src)


def operator_row(version: str) -> Row:
    op = rel.GPU_OPERATOR.get("v" + version.lstrip("v"))
    status = op.status if op else "not in gpuforge's table"
    label = {"supported": "supported until the next major release (then deprecated)"}.get(status, status)
    newest, _ = _newest("gpu_operator")
    ended = op is None or op.status not in ("supported", "deprecated")
    return Row("versions.gpu_operator", version, label, newest, _verdict(ended, version, newest),
               rel.SOURCES["operator-lifecycle"].where)  # fmt: skip


def window_rows(k8s: str, today: date) -> list[Row]:
    """The Kubernetes add-ons' default pins against their cited windows for the default Kubernetes ``k8s``."""
    helm = Versions().helm
    pins = [
        ("versions.helm (Kubernetes skew)", helm, win.HELM_KUBERNETES,
         "helm-skew-4" if helm.startswith("4") else "helm-skew-3"),
        ("kubernetes.cni (calico)", CNI_DEFAULT_VERSIONS["calico"], win.CALICO_KUBERNETES, "calico-requirements"),
        ("kubernetes.batch_queue (volcano)", QUEUE_DEFAULT_VERSIONS["volcano"], win.VOLCANO_KUBERNETES,
         "volcano-compatibility"),
        ("kubernetes.network_operator", NETWORK_OPERATOR_DEFAULT_VERSION, win.NETWORK_OPERATOR_KUBERNETES,
         "network-operator-platforms"),
    ]  # fmt: skip
    out = []
    for field, pinned, table, cite in pins:
        why = win.window_problem(field, pinned, table, k8s, cite)
        if field.startswith("versions.helm") and pinned.startswith("3.") and today > win.HELM3_SECURITY_FIXES_END:
            why = why or f"Helm 3 gets no fixes after {win.HELM3_SECURITY_FIXES_END}"
        row = table.get(win.minor_key(pinned))
        label = f"Kubernetes 1.{row[0]}-1.{row[1]}" if row else "not in the table"
        minor = int(k8s.split(".")[1])
        covered = any(lo <= minor <= hi for lo, hi in table.values())  # a release to move to exists
        verdict = "ok" if not why else ("OUTSIDE" if covered else "none yet")
        out.append(Row(field, pinned, label, "-", verdict, win.SOURCES[cite].where))
    return out


def rows(today: date) -> list[Row]:
    """The report, one row per pin."""
    defaults = Versions()
    out = []
    for name in EXAMPLES:
        data = yaml.safe_load((REPO / "inventories" / f"{name}.yaml").read_text())
        out.append(driver_row(f"inventories/{name}.yaml", str(data["versions"]["driver"]["version"]), today))
    out.append(operator_row(defaults.gpu_operator))
    out.append(kubernetes_row(defaults.kubernetes, today))
    for field in ("container_toolkit", "dcgm", "dcgm_exporter", "mig_manager", "pyxis", "enroot", "helm"):
        pinned = str(getattr(defaults, field))
        newest, src = _newest(field)
        out.append(Row(f"versions.{field}", pinned, NO_DATE, newest,
                       _verdict(None, pinned, newest), src))  # fmt: skip
    queue = BatchQueue().version
    out.append(Row("kubernetes.batch_queue.version", queue, NO_DATE, "-",
                   "no date", "-"))  # fmt: skip
    return out + window_rows(defaults.kubernetes, today)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--today", type=date.fromisoformat, default=date.today(), help="YYYY-MM-DD (default: now)")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a pin is past its end of support or outside its window"
    )
    args = parser.parse_args(argv)
    report = rows(args.today)
    if args.json:
        print(json.dumps({"today": args.today.isoformat(), "pins": [asdict(r) for r in report]}, indent=2))
    else:
        width = max(len(r.field) for r in report)
        print(f"{'field'.ljust(width)}  {'pinned':<14} {'verdict':<8} {'newest':<14} end of support")
        for r in report:
            print(f"{r.field.ljust(width)}  {r.pinned:<14} {r.verdict:<8} {r.newest:<14} {r.end_of_support}")
    return 1 if args.strict and any(r.verdict in ("ENDED", "OUTSIDE") for r in report) else 0


if __name__ == "__main__":
    sys.exit(main())
