"""``bench/pinned_versions.py``: every pinned default with its upstream end of support, from the tables only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "pinned_versions.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it: its own process, no network needed (it reads nothing remote)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_lists_every_pin_with_its_end_of_support() -> None:
    result = run("--today", "2026-11-26", "--json")
    assert result.returncode == 0, result.stderr
    pins = {p["field"]: p for p in json.loads(result.stdout)["pins"]}
    slurm = pins["inventories/slurm-h100.yaml: versions.driver"]
    assert (slurm["pinned"], slurm["end_of_support"]) == ("580.173.02", "June 2028 (long term support branch)")
    k8s = pins["inventories/k8s-gpu-operator.yaml: versions.driver"]
    assert (k8s["pinned"], k8s["end_of_support"], k8s["verdict"]) == (
        "595.91.07",
        "March 2027 (production branch)",
        "ok",
    )
    assert pins["versions.mig_manager"]["pinned"] == "0.15.0" and pins["versions.mig_manager"]["newest"] == "0.15.0"
    assert pins["versions.gpu_operator"]["verdict"] == "ok"
    for field in ("container_toolkit", "dcgm", "dcgm_exporter", "pyxis", "enroot", "helm", "kubernetes"):
        assert f"versions.{field}" in pins, field
    assert all(p["end_of_support"] for p in pins.values())


def test_strict_fails_once_a_pin_has_ended() -> None:
    """R595 ends in March 2027: from April 2027 the k8s example's pin is flagged and --strict exits 1."""
    assert run("--today", "2026-11-26", "--strict").returncode == 0
    later = run("--today", "2027-04-01", "--strict")
    assert later.returncode == 1
    line = next(x for x in later.stdout.splitlines() if x.startswith("inventories/k8s-gpu-operator.yaml"))
    assert "ENDED" in line and "March 2027" in line


def test_add_on_windows_flag_only_what_a_release_could_fix() -> None:
    """A default add-on outside its cited Kubernetes window is OUTSIDE (and fails --strict) when another
    release in the table covers that Kubernetes; with none, it is shown as 'none yet'."""
    import importlib.util
    from datetime import date

    spec = importlib.util.spec_from_file_location("pinned_versions", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["pinned_versions"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    today = date(2026, 11, 29)
    now = {r.field: r.verdict for r in module.window_rows("1.36.4", today)}
    assert now == {
        "versions.helm (Kubernetes skew)": "ok",  # helm 4.2: 1.33-1.36
        "kubernetes.cni (calico)": "ok",  # calico 3.32: 1.34-1.36
        "kubernetes.batch_queue (volcano)": "none yet",  # no Volcano release lists 1.36
        "kubernetes.network_operator": "none yet",  # 26.4: 1.31-1.35
    }
    older = {r.field: r.verdict for r in module.window_rows("1.30.2", today)}
    assert older["versions.helm (Kubernetes skew)"] == "OUTSIDE"  # helm 3.18 covers 1.30
    assert older["kubernetes.cni (calico)"] == "OUTSIDE"  # calico 3.29 covers 1.30
