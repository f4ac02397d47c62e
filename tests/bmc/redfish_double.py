"""A minimal Redfish service double on 127.0.0.1 (TLS, in a thread) for what sushy-tools' emulator
does not do: ETags. It serves one ComputerSystem, ``/redfish/v1/Systems/1``, whose GET answers an
``ETag`` header (as DMTF's Redfish-Tacklebox expects of a service that has one: it reads
``system.getheader("ETag")`` and sends it back in ``If-Match``), and whose PATCH applies the Boot
properties sent only when ``If-Match`` equals the current ETag, else answers 412 with a Redfish
error body. It is a double, not an emulator: nothing else of Redfish is there, and a one-time
override stays set (no boot happens here). Every request is recorded (method, path, headers, body).
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SYSTEM = "/redfish/v1/Systems/1"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Double:
    port: int
    boot: dict[str, Any]
    etag: int = 1
    stale: bool = False  # answer every PATCH 412, as if another client had just changed the system
    seen: list[Seen] = field(default_factory=list)

    def tag(self) -> str:
        return f'W/"{self.etag}"'


def _handler(double: Double) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 200:
                self.send_header("ETag", double.tag())
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            double.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            return body

        def do_GET(self) -> None:
            self._record()
            if self.path != SYSTEM:
                return self._send(404)
            self._send(200, {"@odata.id": SYSTEM, "Id": "1", "PowerState": "Off", "Boot": dict(double.boot)})

        def do_PATCH(self) -> None:
            body = self._record()
            if double.stale or self.headers.get("If-Match") != double.tag():
                error = {"Message": "The ETag supplied did not match the ETag required to change this resource."}
                return self._send(
                    412, {"error": {"code": "Base.1.8.PreconditionFailed", "@Message.ExtendedInfo": [error]}}
                )
            double.boot.update(body["Boot"])
            double.etag += 1
            self._send(204)

    return Handler


def start(cert: Path, key: Path, boot: dict[str, Any]) -> tuple[Double, ThreadingHTTPServer]:
    """The double serving a system whose Boot object is ``boot``, on a free loopback port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    double = Double(server.server_address[1], dict(boot))
    server.RequestHandlerClass = _handler(double)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return double, server
