"""A minimal HTTP client (stdlib ``http.client``) that sends each given path exactly as written (no
normalising of ``..``, as a hostile client would) and prints one JSON line per request: run inside
the node's network namespace by the serve test.

``python -m tests.provision.http_client HOST PORT [--method METHOD] PATH...``: per path, the status,
the body's length and SHA-256, and the body itself when it is short text.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json


def fetch(host: str, port: int, method: str, path: str) -> dict[str, object]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
        conn.endheaders()
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    return {
        "path": path,
        "status": answer.status,
        "length": len(body),
        "content_length": answer.getheader("Content-Length"),
        "sha256": hashlib.sha256(body).hexdigest(),
        "text": body.decode() if len(body) < 4096 and answer.status == 200 and body.isascii() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--method", default="GET")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    for path in args.paths:
        print(json.dumps(fetch(args.host, args.port, args.method, path)), flush=True)


if __name__ == "__main__":
    main()
