"""The admin kubeconfig on the control host: fetched from the first control plane, 0600 from its
first byte, replaced atomically, never printed; a clear error when there is none."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.orchestrate import kubeconfig
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import Cluster
from tests.conftest import REPO

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
ADMIN_CONF = """apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority-data: Q0E=, server: 'https://198.51.100.9:6443'}
  name: kgpu
users:
- name: kubernetes-admin
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZLXNlY3JldA==}
"""


def fake_remote(monkeypatch: pytest.MonkeyPatch, rc: int, stdout: str, stderr: str = "") -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    def run(cluster: Any, node: str, command: str, timeout: float = 120) -> Any:
        calls.append((node, command))
        return subprocess.CompletedProcess(["ssh"], rc, stdout, stderr)

    monkeypatch.setattr(kubeconfig.remote, "run", run)
    return calls


def test_fetched_from_the_first_control_plane_and_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    calls = fake_remote(monkeypatch, 0, ADMIN_CONF)
    old = os.umask(0o022)  # a permissive umask must not matter
    try:
        path = kubeconfig.fetch(Cluster.of(load_spec(K8S), K8S))
    finally:
        os.umask(old)
    assert calls == [("kcp1", "cat /etc/kubernetes/admin.conf")]
    assert path == tmp_path / "state" / "kgpu" / "admin.conf"
    assert path.read_text() == ADMIN_CONF
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0
    assert [p.name for p in path.parent.iterdir()] == ["admin.conf"]  # no temporary file left


def test_replaced_atomically(tmp_path: Path) -> None:
    target = tmp_path / "admin.conf"
    kubeconfig.write_private(target, "old\n")
    inode = target.stat().st_ino
    kubeconfig.write_private(target, "new\n")
    assert target.read_text() == "new\n" and target.stat().st_ino != inode  # renamed over, not rewritten


@pytest.mark.parametrize(
    ("rc", "stdout", "stderr", "message"),
    [
        (1, "", "cat: /etc/kubernetes/admin.conf: No such file or directory", "has kubeadm init run?"),
        (0, "<html>not a kubeconfig</html>", "", "is not a kubeconfig"),
    ],
)
def test_no_kubeconfig_is_an_error_that_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rc: int, stdout: str, stderr: str, message: str
) -> None:
    fake_remote(monkeypatch, rc, stdout, stderr)
    with pytest.raises(kubeconfig.KubeconfigError, match=message):
        kubeconfig.fetch(Cluster.of(load_spec(K8S), K8S), tmp_path / "admin.conf")
    assert not (tmp_path / "admin.conf").exists()


def test_the_cli_prints_the_path_never_the_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuforge.cli import app

    fake_remote(monkeypatch, 0, ADMIN_CONF)
    dest = tmp_path / "kube" / "config"
    result = CliRunner().invoke(app, ["kubeconfig", str(K8S), "-o", str(dest)])
    assert result.exit_code == 0, result.output
    assert f"KUBECONFIG={dest}" in result.output.replace("\n", "")
    assert "S0VZLXNlY3JldA==" not in result.output and dest.stat().st_mode & 0o777 == 0o600
