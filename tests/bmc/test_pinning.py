"""The pin is checked before any credential leaves: a TLS server on 127.0.0.1 records every byte
it receives after the handshake; with a wrong fingerprint it receives none."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bmc.transport import BmcError, Credentials, Endpoint, request
from tests.bmc.emulator import make_cert

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


class Recorder:
    """Accepts TLS connections one at a time; keeps what each sent; answers ``{}`` to a request."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            self.received.append(self._one(raw))

    def _one(self, raw: socket.socket) -> bytes:
        data = b""
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as tls:
                tls.settimeout(5)
                while b"\r\n\r\n" not in data:
                    chunk = tls.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if data:
                    tls.sendall(ANSWER)
        except (OSError, ssl.SSLError):
            pass
        return data


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[tuple[Recorder, str]]:
    cert, key, fingerprint = make_cert(tmp_path)
    rec = Recorder(cert, key)
    yield rec, fingerprint
    rec.sock.close()


def _wait_for(rec: Recorder, count: int) -> None:
    for _ in range(100):
        if len(rec.received) >= count:
            return
        threading.Event().wait(0.05)


def test_a_wrong_fingerprint_sends_nothing_and_the_right_one_sends_the_request(
    recorder: tuple[Recorder, str],
) -> None:
    rec, fingerprint = recorder
    creds = Credentials("admin", "pinned-secret")
    with pytest.raises(BmcError) as e:
        request(Endpoint("127.0.0.1", rec.port, "0" * 64), creds, "GET", "/redfish/v1/Systems")
    assert f"fingerprint is {fingerprint}, the spec pins {'0' * 64}" in str(e.value)
    assert "pinned-secret" not in str(e.value)
    _wait_for(rec, 1)
    assert rec.received == [b""]  # the handshake finished, then the client hung up: no Authorization header
    assert request(Endpoint("127.0.0.1", rec.port, fingerprint), creds, "GET", "/redfish/v1/Systems") == {}
    _wait_for(rec, 2)
    assert rec.received[1].startswith(b"GET /redfish/v1/Systems HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Basic YWRtaW46cGlubmVkLXNlY3JldA==\r\n" in rec.received[1]


def test_a_path_outside_the_redfish_root_is_never_requested(recorder: tuple[Recorder, str]) -> None:
    rec, fingerprint = recorder
    for path in (
        "https://198.51.100.9/redfish/v1/Systems",
        "/redfish/v1/../../etc",
        "/redfish/v1/Systems/./1",
        "/redfish/v1/a b",
        "/x",
    ):
        with pytest.raises(BmcError, match="not a path under /redfish/v1"):
            request(Endpoint("127.0.0.1", rec.port, fingerprint), Credentials("a", "b"), "GET", path)
    assert rec.received == []


def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BmcError, match=rf"^BMC 127.0.0.1:{port}: cannot connect over TLS: Connection refused$"):
        request(Endpoint("127.0.0.1", port, "0" * 64, timeout_s=5), Credentials("a", "b"), "GET", "/redfish/v1")
