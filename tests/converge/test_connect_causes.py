"""plan/apply say why a node is unreachable, per node, as fast as validate does: real sockets on
127.0.0.1 (a closed port, a port that accepts and closes, an SSH server whose key is missing from or
different in known_hosts, one that sends hostile text), never traffic off the machine."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest
from rich.console import Console

from gpuforge.deploy.connect import CAUSE_CHARS, explain
from gpuforge.deploy.run import run_site
from gpuforge.deploy.runstate import RunState
from gpuforge.orchestrate.plan import PlanResult
from gpuforge.spec import parse_spec
from gpuforge.spec.cluster import Cluster

#: validate's bound for a node that refuses or hangs up (ssh -o ConnectTimeout=10 plus one retry).
VALIDATE_SECONDS = 10.0

SPEC = """\
cluster: {{name: t, scheduler: slurm, os: debian12}}
ssh: {{port: {port}, key: {key}, known_hosts: {known_hosts}}}
node_groups:
  - name: ctl
    hosts: node1
    address_start: 127.0.0.1
    roles: [controller, compute]
    hardware: {{sockets: 1, cores_per_socket: 2, threads_per_core: 1, real_memory_mb: 1000}}
slurm:
  accounting: {{enabled: false}}
  partitions:
    - {{name: batch, nodes: ctl}}
"""


def client_key(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519"
    key = paramiko.RSAKey.generate(2048)
    key.write_private_key_file(str(path))
    return path


def unreachable(tmp_path: Path, port: int, known_hosts: Path) -> tuple[str, float]:
    """``run_site`` on a one-node spec at 127.0.0.1:``port``: the node's error and the seconds taken."""
    text = SPEC.format(port=port, key=client_key(tmp_path), known_hosts=known_hosts)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(text)
    spec = parse_spec(text, str(spec_path))
    t0 = time.monotonic()
    result = run_site(Cluster.of(spec, spec_path), None, RunState(dry_run=True))
    seconds = time.monotonic() - t0
    host = result.hosts["node1"]
    assert not host.connected and host.error
    return host.error, seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_loopback(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A listening port on 127.0.0.1 whose every connection goes to ``handle``; yields the port and
    stops the server after."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            handle(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join()
    srv.close()


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A port that accepts every connection and closes it at once."""
    yield from serve_loopback(lambda conn: conn.close())


class _Server(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_FAILED


@pytest.fixture(scope="module")
def host_key() -> paramiko.RSAKey:
    return paramiko.RSAKey.generate(2048)


@pytest.fixture
def ssh_server(host_key: paramiko.RSAKey) -> Iterator[int]:
    """A real SSH server on 127.0.0.1 (paramiko's): it shows ``host_key`` and refuses every login."""
    transports: list[paramiko.Transport] = []

    def handle(conn: socket.socket) -> None:
        tr = paramiko.Transport(conn)
        tr.add_server_key(host_key)
        transports.append(tr)
        try:
            tr.start_server(server=_Server())
        except (paramiko.SSHException, EOFError, OSError):
            tr.close()

    yield from serve_loopback(handle)
    for tr in transports:
        tr.close()


def known_hosts_with(path: Path, port: int, key: paramiko.PKey) -> Path:
    path.write_text(f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n")
    return path


def test_a_closed_port_is_connection_refused_at_once(tmp_path: Path) -> None:
    error, seconds = unreachable(tmp_path, free_port(), tmp_path / "known_hosts")
    assert error.startswith("unreachable over SSH: connection refused: nothing listens on the SSH port ("), error
    assert "Connection refused" in error
    assert seconds < 3.0, seconds  # no retries of a refusal (pyinfra's would add 2-4 s)


def test_a_port_that_accepts_and_closes_is_named_and_bounded(tmp_path: Path, closing_port: int) -> None:
    error, seconds = unreachable(tmp_path, closing_port, tmp_path / "known_hosts")
    assert error.startswith("unreachable over SSH: the node closed the connection"), error
    assert seconds < VALIDATE_SECONDS, seconds


@pytest.mark.parametrize("file_exists", [True, False], ids=["empty-known-hosts", "no-known-hosts-file"])
def test_a_node_missing_from_known_hosts_is_host_key_unknown(
    tmp_path: Path, ssh_server: int, file_exists: bool
) -> None:
    known_hosts = tmp_path / "known_hosts"
    if file_exists:
        known_hosts.write_text("")
    error, seconds = unreachable(tmp_path, ssh_server, known_hosts)
    assert error.startswith(
        "unreachable over SSH: host key unknown: the node is not in the known_hosts file (ssh.known_hosts, "
        "else ~/.ssh/known_hosts); add its key ("
    ), error
    assert seconds < 3.0, seconds


def test_a_changed_host_key_is_named(tmp_path: Path, ssh_server: int) -> None:
    other = paramiko.RSAKey.generate(2048)
    error, _ = unreachable(tmp_path, ssh_server, known_hosts_with(tmp_path / "known_hosts", ssh_server, other))
    assert error.startswith("unreachable over SSH: host key changed: the node's key is not the one in known_hosts"), (
        error
    )


def test_a_refused_login_is_named(tmp_path: Path, ssh_server: int, host_key: paramiko.RSAKey) -> None:
    error, _ = unreachable(tmp_path, ssh_server, known_hosts_with(tmp_path / "known_hosts", ssh_server, host_key))
    assert error.startswith("unreachable over SSH: login refused (check ssh.user and ssh.key) ("), error


def test_hostile_connector_text_is_one_bounded_line_without_control_characters() -> None:
    said = "SSH error (Error reading SSH protocol banner\x1b[2J\x1b]52;c;ZXZpbA==\x07" + "A" * 5000 + "\nnext line)"
    line = explain(said)
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line
    assert line.startswith("unreachable over SSH: the node closed the connection before SSH began (SSH error")
    assert "\\x1b[2J" in line and len(line) < CAUSE_CHARS + 200


def test_plan_prints_a_node_s_error_as_text_not_markup() -> None:
    """A banner saying ``[/x]`` (Rich's closing tag) or ``[red]`` is printed as it is, and raises nothing."""
    error = explain("SSH error (Error reading SSH protocol banner [/x] [red]\x1b[31m)")
    console = Console(file=io.StringIO(), width=400, color_system=None)
    PlanResult({"node1": []}, {"node1": error}).print(console)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"node1: {error}" in shown and "[/x] [red]" in shown and "\x1b" not in shown
