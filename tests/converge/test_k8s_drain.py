"""Rolling changes on Kubernetes: cordon + drain, and uncordon only what the rollout cordoned.

The commands run for real in ``sh`` against a stand-in ``kubectl`` on PATH that keeps each node's
``unschedulable`` flag and annotations in files and logs its calls (nothing here runs a cluster).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuforge.orchestrate.k8s_drain import CORDON_MARK, CORDONED_BY, drain_command, resume_command

FAKE_KUBECTL = r"""#!/bin/sh
# kubectl stand-in: state under $KSTATE/<node>/{unschedulable,annotation}; calls logged in $KSTATE/log
[ "$1" = --kubeconfig ] && shift 2
echo "$*" >> "$KSTATE/log"
verb=$1; shift
case "$verb" in
  get) node=$2
       case "$4" in
         *unschedulable*) cat "$KSTATE/$node/unschedulable" 2>/dev/null ;;
         *cordoned-by*) cat "$KSTATE/$node/annotation" 2>/dev/null ;;
       esac ;;
  annotate) node=$2
       case "$*" in
         *=*) echo "$4" | cut -d= -f2 > "$KSTATE/$node/annotation" ;;
         *-) rm -f "$KSTATE/$node/annotation" ;;
       esac ;;
  cordon) echo true > "$KSTATE/$1/unschedulable" ;;
  uncordon) rm -f "$KSTATE/$1/unschedulable" ;;
  drain) if [ -e "$KSTATE/$1/pdb-blocks" ]; then
           echo "error: Cannot evict pod as it would violate the pod's disruption budget." >&2; exit 1
         fi ;;
esac
"""


@pytest.fixture
def kube(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    state = tmp_path / "state"
    for node in ("kgpu01", "kgpu02"):
        (state / node).mkdir(parents=True)
    return tmp_path


def run(kube: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{kube / 'bin'}:{os.environ['PATH']}", "KSTATE": str(kube / "state")}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)


def unschedulable(kube: Path, node: str) -> bool:
    return (kube / "state" / node / "unschedulable").exists()


def test_drain_then_resume_gives_the_nodes_back(kube: Path) -> None:
    assert run(kube, drain_command(["kgpu01", "kgpu02"], 600)).returncode == 0
    assert unschedulable(kube, "kgpu01") and unschedulable(kube, "kgpu02")
    assert (kube / "state" / "kgpu01" / "annotation").read_text().strip() == CORDON_MARK
    log = (kube / "state" / "log").read_text()
    assert "drain kgpu01 --ignore-daemonsets --delete-emptydir-data --timeout=600s" in log
    assert run(kube, resume_command(["kgpu01", "kgpu02"])).returncode == 0
    assert not unschedulable(kube, "kgpu01") and not unschedulable(kube, "kgpu02")
    assert not (kube / "state" / "kgpu01" / "annotation").exists()


def test_a_node_an_operator_cordoned_stays_cordoned(kube: Path) -> None:
    (kube / "state" / "kgpu02" / "unschedulable").write_text("true\n")  # cordoned before the rollout
    assert run(kube, drain_command(["kgpu01", "kgpu02"], 60)).returncode == 0
    assert not (kube / "state" / "kgpu02" / "annotation").exists()
    assert run(kube, resume_command(["kgpu01", "kgpu02"])).returncode == 0
    assert not unschedulable(kube, "kgpu01")
    assert unschedulable(kube, "kgpu02")  # not ours to give back


def test_a_drain_blocked_by_a_disruption_budget_fails_the_batch(kube: Path) -> None:
    (kube / "state" / "kgpu01" / "pdb-blocks").write_text("")
    cp = run(kube, drain_command(["kgpu01", "kgpu02"], 60))
    assert cp.returncode != 0 and "disruption budget" in cp.stderr
    assert "drain kgpu02" not in (kube / "state" / "log").read_text()  # stops at the first node it cannot drain


def test_commands_name_the_admin_kubeconfig_and_the_mark() -> None:
    cmd = drain_command(["kgpu01"], 0)
    assert cmd.startswith('if [ "$(kubectl --kubeconfig /etc/kubernetes/admin.conf get node kgpu01')
    assert f"annotate node kgpu01 --overwrite {CORDONED_BY}={CORDON_MARK}" in cmd
    assert "--timeout=1s" in cmd  # never an unbounded drain
    assert drain_command([], 60) == "true" and resume_command([]) == "true"


def test_node_states_read_who_cordoned_each_node() -> None:
    from gpuforge.orchestrate.k8s_drain import parse_states, state_command

    cmd = state_command()
    assert cmd.startswith("kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o jsonpath=")
    # kubectl's output for that jsonpath: unset fields print as empty strings.
    out = "kgpu01||\nkgpu02|true|\nkgpu03|true|rolling-change\nkgpu04||rolling-change\n"
    assert parse_states(out) == {
        "kgpu01": (False, False),
        "kgpu02": (True, False),  # an operator's cordon
        "kgpu03": (True, True),  # this rollout's
        "kgpu04": (False, False),  # a stale mark on a schedulable node is nobody's hold
    }
