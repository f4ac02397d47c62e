"""The control planes' timers: kubeadm's certificates renewed before they expire, etcd snapshots kept N;
and the validator's days-left check.

The scripts run for real in ``sh`` with stand-in ``kubeadm``/``crictl``/``sleep`` on PATH and the control
plane's directories under a temporary root. ``kubeadm certs check-expiration -o json`` answers with a
fixture in its upstream format (``output.kubeadm.k8s.io/v1alpha3`` CertificateExpirationInfo, the fields of
kubeadm's ``cmd/kubeadm/app/apis/output/v1alpha3/types.go``), read on 2026-11-26 at 09:15 UTC: the
apiserver certificate expires in 19 days, the others in 273; one externally managed certificate sooner.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts, StepKind, plan_layer
from gpuforge.deploy.layers.kubernetes import maintenance_layer
from gpuforge.render import k8s_maintenance as m
from gpuforge.spec import SpecError, resolve_nodes
from gpuforge.spec.load import parse_spec
from gpuforge.validator.cluster_k8s_certs import judge, parse_expiration
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS
from tests import yaml_text
from tests.helpers import INVENTORIES

FIXTURE = Path(__file__).parents[1] / "validator" / "fixtures" / "kubeadm" / "check-expiration.json"
READ_AT = datetime(2026, 11, 26, 9, 15, tzinfo=UTC)


def spec_of(mutate: Any = None) -> Any:
    d = yaml.safe_load((INVENTORIES / "k8s-gpu-operator.yaml").read_text())
    if mutate:
        mutate(d["kubernetes"])
    return parse_spec(yaml_text.dump(d), "k8s.yaml")


def node(spec: Any, name: str) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == name)


def tools(root: Path, bodies: dict[str, str]) -> dict[str, str]:
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in bodies.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(root / "log")}


def run(script: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = script.replace("/etc/kubernetes", str(root / "etc/kubernetes")).replace("/var/", f"{root}/var/")
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------- certificate renewal


@pytest.fixture
def control_plane(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    manifests = tmp_path / "etc/kubernetes/manifests"
    manifests.mkdir(parents=True)
    for pod in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip"):
        (manifests / f"{pod}.yaml").write_text(f"kind: Pod # {pod}\n")
    env = tools(tmp_path, {
        "kubeadm": f'echo "kubeadm $*" >> "$LOG"; [ "$2" = check-expiration ] && cat {FIXTURE}; exit 0',
        # the kubelet's view of the manifests while the script waits: which control plane pods it would run
        "sleep": f'echo "sleep $* (running: $(ls {manifests} | tr "\\n" " "))" >> "$LOG"',
    })  # fmt: skip
    return tmp_path, env


def test_a_certificate_due_is_renewed_and_the_pods_restart_one_at_a_time(control_plane: Any) -> None:
    root, env = control_plane
    cp = run(m.certs_script(60), root, env)
    assert cp.returncode == 0, cp.stderr
    assert "a certificate expires in 19 days: kubeadm certs renew all" in cp.stdout
    log = (root / "log").read_text().splitlines()
    assert log[:2] == ["kubeadm certs check-expiration -o json", "kubeadm certs renew all"]
    stopped = [line for line in log if line.startswith("sleep 25") and "running" in line][::2]
    assert len(stopped) == 4  # each control plane pod stopped alone while the others run
    for line, pod in zip(stopped, ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"), strict=True):
        assert f"{pod}.yaml" not in line and line.count(".yaml") == 4, line
    assert sorted(p.name for p in (root / "etc/kubernetes/manifests").iterdir()) == [
        "etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml", "kube-vip.yaml",
    ]  # fmt: skip


def test_certificates_with_time_left_are_left_alone(control_plane: Any) -> None:
    root, env = control_plane
    cp = run(m.certs_script(10), root, env)  # 19 days left, renew below 10
    assert cp.returncode == 0 and "certificates valid for 19 more days" in cp.stdout
    assert (root / "log").read_text().splitlines() == ["kubeadm certs check-expiration -o json"]


def test_a_manifest_an_interrupted_renewal_moved_away_is_put_back(control_plane: Any) -> None:
    root, env = control_plane
    held = root / "etc/kubernetes/gpuforge-restarting"
    held.mkdir()
    (root / "etc/kubernetes/manifests/etcd.yaml").rename(held / "etcd.yaml")
    assert run(m.certs_script(10), root, env).returncode == 0
    assert (root / "etc/kubernetes/manifests/etcd.yaml").exists() and not list(held.iterdir())


def test_no_certificate_listed_fails_the_run(tmp_path: Path) -> None:
    env = tools(tmp_path, {"kubeadm": "echo '{\"certificates\": []}'"})
    cp = run(m.certs_script(60), tmp_path, env)
    assert cp.returncode == 1 and "listed no certificate" in cp.stderr


# --------------------------------------------------------------------------- the validator's days left


def test_the_validator_reads_days_left_from_kubeadms_json() -> None:
    text = FIXTURE.read_text()
    certs = parse_expiration(text, READ_AT)
    assert certs[0] == ("apiserver", 19)  # the externally managed one (3 days) is not kubeadm's to renew
    assert "apiserver-custom" not in dict(certs) and len(certs) == 11
    assert judge(text, 30, READ_AT) == (FAIL, "apiserver expires in 19 days (fewer than 30): is the renewal timer "
                                               "running?")  # fmt: skip
    assert judge(text, 14, READ_AT) == (PASS, "soonest: apiserver in 19 days")
    assert judge(text, 14, READ_AT + timedelta(days=10))[0] == FAIL
    assert judge("Error: open /etc/kubernetes/pki/ca.crt: no such file", 30, READ_AT)[0] == BLOCKED


# --------------------------------------------------------------------------- etcd snapshots


def snapshot_tools(root: Path, fail_save: bool = False) -> dict[str, str]:
    crictl = f"""while [ "${{1#--}}" != "$1" ]; do shift 2; done
echo "crictl $*" >> "$LOG"
case "$1" in
  ps) echo 0123abcd ;;
  exec) shift 2; tool=$1; shift
        while [ "${{1#--}}" != "$1" ]; do shift; done
        case "$tool $1 $2" in
          "etcdctl snapshot save") {"exit 1" if fail_save else 'echo "etcd data" > "$3"'} ;;
          "etcdutl snapshot status") [ -s "$3" ] ;;
        esac ;;
esac"""
    return tools(root, {"crictl": crictl, "date": 'echo "${STAMP:-20261126T020000Z}"'})


def test_a_snapshot_is_checked_then_kept_with_the_newest_n(tmp_path: Path) -> None:
    (tmp_path / "var/lib/etcd").mkdir(parents=True)
    env = snapshot_tools(tmp_path)
    backups = tmp_path / "var/backups/gpuforge/etcd"
    for day in range(20, 26):
        backups.mkdir(parents=True, exist_ok=True)
        (backups / f"etcd-202611{day}T020000Z.db").write_text("old")
    (backups / "notes.txt").write_text("an operator's file")
    cp = run(m.snapshot_script("/var/backups/gpuforge/etcd", 3), tmp_path, env)
    assert cp.returncode == 0, cp.stderr
    assert sorted(p.name for p in backups.iterdir()) == [
        "etcd-20261124T020000Z.db", "etcd-20261125T020000Z.db", "etcd-20261126T020000Z.db", "notes.txt",
    ]  # fmt: skip
    assert (backups / "etcd-20261126T020000Z.db").read_text() == "etcd data\n"
    assert oct((backups / "etcd-20261126T020000Z.db").stat().st_mode & 0o777) == "0o600"
    calls = (tmp_path / "log").read_text()
    assert "snapshot save /var/lib/etcd/gpuforge-snapshot.db.part".replace("/var/", f"{tmp_path}/var/") in calls
    assert calls.index("etcdctl") < calls.index("etcdutl snapshot status")


def test_a_failed_snapshot_leaves_nothing_under_a_final_name(tmp_path: Path) -> None:
    (tmp_path / "var/lib/etcd").mkdir(parents=True)
    cp = run(m.snapshot_script("/var/backups/gpuforge/etcd", 3), tmp_path, snapshot_tools(tmp_path, fail_save=True))
    assert cp.returncode != 0
    assert list((tmp_path / "var/backups/gpuforge/etcd").iterdir()) == []


# --------------------------------------------------------------------------- units and timers


def test_each_control_plane_gets_both_timers_at_its_own_time() -> None:
    spec = spec_of()
    calendars = {}
    for name in ("kcp1", "kcp2", "kcp3"):
        units = m.maintenance_units(spec, node(spec, name))
        assert [u for u, *_ in units] == ["gpuforge-k8s-certs.timer", "gpuforge-etcd-snapshot.timer"]
        calendars[name] = [t.data.decode().split("OnCalendar=")[1].split("\n")[0] for *_, t in units]
    assert calendars == {"kcp1": ["*-*-* 03:30:00", "*-*-* 01:00:00"], "kcp2": ["*-*-* 06:30:00", "*-*-* 02:00:00"],
                         "kcp3": ["*-*-* 09:30:00", "*-*-* 03:00:00"]}  # fmt: skip
    assert m.maintenance_units(spec, node(spec, "kgpu01")) == []
    off = spec_of(lambda k: k.update(certificates={"enabled": False}, etcd_snapshots={"enabled": False}))
    assert maintenance_layer(off, node(off, "kcp1")).is_empty


def test_the_timers_are_enabled_and_started_and_restarted_when_they_change() -> None:
    spec = spec_of(lambda k: k.update(etcd_snapshots={"schedule": "hourly", "keep": 48}))
    steps, _ = plan_layer(maintenance_layer(spec, node(spec, "kcp2")), LayerFacts())
    started = [s.command for s in steps if s.kind in (StepKind.START, StepKind.RESTART)]
    assert [c.split(" &&")[0] if c else c for c in started] == [
        "systemctl restart gpuforge-k8s-certs.timer", "systemctl restart gpuforge-etcd-snapshot.timer",
    ]  # fmt: skip
    timer = next(s.upload for s in steps if s.upload and s.upload.path.endswith("snapshot.timer"))
    assert "OnCalendar=*-*-* *:07:00" in timer.data.decode() and "Persistent=true" in timer.data.decode()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda k: k.update(certificates={"renew_days_before": 20, "warn_days": 30}), "certificates.warn_days"),
        (lambda k: k.update(etcd_snapshots={"directory": "/var/backups/../etc"}), "etcd_snapshots.directory"),
        (lambda k: k.update(etcd_snapshots={"directory": "/var/b; rm -rf /"}), "etcd_snapshots.directory"),
    ],
)  # fmt: skip
def test_bad_maintenance_settings_name_their_field(mutate: Any, field: str) -> None:
    with pytest.raises(SpecError) as e:
        spec_of(mutate)
    assert f"kubernetes.{field}" in e.value.format()


def test_the_fixture_is_kubeadms_output_type() -> None:
    doc = json.loads(FIXTURE.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("output.kubeadm.k8s.io/v1alpha3", "CertificateExpirationInfo")
    fields = {"name", "expirationDate", "residualTime", "externallyManaged", "caName", "missing"}
    assert all(set(c) <= fields for c in doc["certificates"] + doc["certificateAuthorities"])


# --------------------------------------------------------------------------- with a real etcd

REAL_CRICTL = """while [ "${1#--}" != "$1" ]; do shift 2; done
case "$1" in
  ps) echo etcd-container ;;
  exec) shift 2; tool=$1; shift
        args=""
        for a in "$@"; do case "$a" in --endpoints=*|--cacert=*|--cert=*|--key=*) ;; *) args="$args $a" ;; esac; done
        # the distribution's etcd 3.4 has no etcdutl: its etcdctl reads a snapshot's status
        [ "$tool" = etcdutl ] && tool=etcdctl
        exec $tool --endpoints="$ETCD_URL" $args ;;
esac"""


@pytest.mark.skipif(shutil.which("etcd") is None or shutil.which("etcdctl") is None, reason="no etcd installed")
def test_a_real_etcd_snapshot_restores_to_the_same_keys(tmp_path: Path) -> None:
    """The snapshot script against a real etcd (the distribution's: apt-get install etcd-server
    etcd-client), then upstream's restore into a new data directory, read back by a new etcd."""
    port = 23790 + os.getpid() % 100
    url = f"http://127.0.0.1:{port}"

    def start(data_dir: Path) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["etcd", "--data-dir", str(data_dir), "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", f"http://127.0.0.1:{port + 1000}", "--name", "kcp1",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{port + 1000}",
             "--initial-cluster", f"kcp1=http://127.0.0.1:{port + 1000}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(100):
            if (
                subprocess.run(["etcdctl", f"--endpoints={url}", "endpoint", "health"], capture_output=True).returncode
                == 0
            ):
                return proc
            time.sleep(0.1)
        proc.kill()
        pytest.fail("etcd did not start")

    etcdctl = ["etcdctl", f"--endpoints={url}"]
    env = {**tools(tmp_path, {"crictl": REAL_CRICTL}), "ETCD_URL": url, "ETCDCTL_API": "3"}
    (tmp_path / "var/lib/etcd").mkdir(parents=True)
    proc = start(tmp_path / "data")
    try:
        subprocess.run(
            [*etcdctl, "put", "/registry/pods/team-vision/job-1", "running"], check=True, capture_output=True
        )
        cp = run(m.snapshot_script("/var/backups/gpuforge/etcd", 2), tmp_path, env)
        assert cp.returncode == 0, cp.stderr
        subprocess.run([*etcdctl, "put", "/registry/pods/team-vision/job-1", "changed later"], check=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    (snapshot,) = (tmp_path / "var/backups/gpuforge/etcd").iterdir()
    restored = tmp_path / "restored"
    subprocess.run(
        ["etcdctl", "snapshot", "restore", str(snapshot), "--data-dir", str(restored), "--name", "kcp1",
         "--initial-cluster", f"kcp1=http://127.0.0.1:{port + 1000}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{port + 1000}"],
        check=True, capture_output=True, env={**os.environ, "ETCDCTL_API": "3"},
    )  # fmt: skip
    proc = start(restored)
    try:
        got = subprocess.run([*etcdctl, "get", "/registry/pods/team-vision/job-1", "--print-value-only"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert got.stdout.strip() == "running"  # the state when the snapshot was taken
    finally:
        proc.terminate()
        proc.wait(timeout=30)
