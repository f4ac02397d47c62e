"""Metrics of a node-local Prometheus exporter (dcgm-exporter, node-exporter), as one reading.

The deploy reads them with ``curl`` over SSH; the node program reads the same HTTP answer
in-process (:func:`local_http_lines`, no curl needed). Both print the body's lines and a status
marker, which :func:`parse_exporter_metrics` reads.
"""

from __future__ import annotations

import math
import re
import shlex
import socket
from typing import TypedDict

from gpuforge.probes._common import guarded, split_guarded
from gpuforge.probes.reading import Reading


class MetricSample(TypedDict):
    """One sample: labels and value (non-finite values kept as strings: ``NaN``, ``+Inf``)."""

    labels: dict[str, str]
    value: float | str


class Metric(TypedDict):
    """One metric family from the Prometheus text exposition."""

    type: str | None
    help: str | None
    samples: list[MetricSample]


class ExporterMetricsInfo(TypedDict):
    """What :data:`EXPORTER_METRICS` reads: ``error`` says why nothing came back."""

    available: bool
    rc: int | None
    error: str | None
    metrics: dict[str, Metric]


CURL_EXIT_CODES: dict[int, str] = {
    6: "could not resolve host",
    7: "failed to connect (exporter not listening)",
    22: "HTTP error status returned",
    28: "operation timed out",
    52: "empty reply from server",
    56: "failure receiving network data",
}

_SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?\s*$")
_LABEL_RE = re.compile(r'\s*(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*,?')


def _unescape_label(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_prometheus_labels(text: str) -> dict[str, str]:
    """Parse ``key="value",...`` (with ``\\"``, ``\\\\`` and ``\\n`` escapes)."""
    return {m.group("key"): _unescape_label(m.group("value")) for m in _LABEL_RE.finditer(text)}


def _sample_value(text: str) -> float | str:
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def parse_prometheus_text(lines: list[str]) -> dict[str, Metric]:
    """Parse Prometheus text exposition format into metric families."""
    metrics: dict[str, Metric] = {}

    def family(name: str) -> Metric:
        return metrics.setdefault(name, Metric(type=None, help=None, samples=[]))

    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in {"HELP", "TYPE"}:
                text = parts[3] if len(parts) > 3 else ""
                if parts[1] == "HELP":
                    family(parts[2])["help"] = text
                else:
                    family(parts[2])["type"] = text
            continue
        match = _SAMPLE_RE.match(line)
        if match is None:
            continue
        family(match.group("name"))["samples"].append(
            MetricSample(
                labels=parse_prometheus_labels(match.group("labels") or ""),
                value=_sample_value(match.group("value")),
            )
        )
    return metrics


def parse_exporter_metrics(lines: list[str]) -> ExporterMetricsInfo:
    """Parse an exporter's ``/metrics`` as guarded ``curl`` or :func:`local_http_lines` print it."""
    out = split_guarded(lines)
    error: str | None = None
    if not out.available:
        error = "curl not found"
    elif out.error is not None:
        error = out.error
    elif out.timeout is not None:
        error = f"no answer within {out.timeout} s"
    elif out.rc not in (None, 0):
        error = f"curl exit code {out.rc}: {CURL_EXIT_CODES.get(out.rc or 0, 'request failed')}"
    return ExporterMetricsInfo(
        available=out.available, rc=out.rc, error=error, metrics=parse_prometheus_text(out.lines)
    )


# --------------------------------------------------------------------------- reading

#: node-exporter's collectors the health check asks for (``collect[]``, node_exporter's README,
#: "Filtering enabled collectors", since v0.15.0; Debian 12 ships 1.5.0): ``textfile`` (gpuforge's
#: health and Slurm metrics, with ``node_textfile_scrape_error``) and ``time``, both enabled by
#: default and by gpuforge's arguments. A full scrape runs every collector (about 0.2 s on a lab
#: node, more on a node with many devices); Prometheus does that, the check need not.
NODE_EXPORTER_QUERY = "?collect%5B%5D=textfile&collect%5B%5D=time"
_TARGET_RE = re.compile(r"^/[^\s'\"]*$")


def exporter_metrics_command(port: int = 9400, target: str = "/metrics") -> str:
    """``curl`` of ``http://localhost:PORT TARGET`` (dcgm-exporter's defaults)."""
    if not 0 < int(port) < 65536 or not _TARGET_RE.match(target):
        raise ValueError(f"invalid exporter address: port {port!r}, target {target!r}")
    return guarded("curl", f"curl -sf --max-time 10 {shlex.quote(f'http://localhost:{int(port)}{target}')}")


def local_http_lines(
    port: int = 9400, target: str = "/metrics", timeout: float = 3.0, limit: int = 4 << 20
) -> list[str]:
    """Body lines of ``GET target`` from a node-local exporter on 127.0.0.1:``port``, then ``__rc=0``;
    ``__error=...`` when it fails.

    A plain HTTP/1.0 request on a socket: the server ends the body by closing the connection and
    must not answer an HTTP/1.0 request with a chunked body (RFC 9112, 6.1), and nothing asks for
    compression. urllib would do the same, for a third of the node program's start-up.
    """
    request = f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    answer = bytearray()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(request.encode("ascii"))
            while len(answer) <= limit and (chunk := conn.recv(1 << 16)):
                answer += chunk
    except OSError as e:
        return [f"__error={e}"]
    head, blank, body = bytes(answer).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    if not blank or len(status) < 2 or not status[0].startswith("HTTP/"):
        return [f"__error=no HTTP answer from 127.0.0.1:{port}"]
    if not status[1].startswith("2"):
        return [f"__error=HTTP {' '.join(status[1:])}"]
    return [*body[:limit].decode("utf-8", "replace").splitlines(), "__rc=0"]


EXPORTER_METRICS: Reading[ExporterMetricsInfo] = Reading(
    "metrics.exporter", exporter_metrics_command, parse_exporter_metrics, timeout_s=12.0, local=local_http_lines
)
