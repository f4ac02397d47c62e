"""A boot network of its own for the dnsmasq test: two network namespaces (the server's, the node's)
joined by a veth pair, and the installed dnsmasq running the rendered configuration in the server's.

Names are unique per run (``gfs``/``gfc`` and 8 random hex digits: veth names stay under 16 bytes).
Everything is removed when the ``with`` block ends, also on an error: dnsmasq is stopped by its own
process id, and deleting each namespace deletes its end of the veth pair (so the pair).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DNSMASQ = "/usr/sbin/dnsmasq"
SERVER_ADDRESS = "10.99.0.1/24"
ROOT = Path(__file__).resolve().parents[2]


def why_not() -> str | None:
    """Why this machine cannot run the test (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces and a DHCP server on port 67 need root"
    for tool in (DNSMASQ, "ip", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@dataclass
class BootNetwork:
    """The two namespaces, the veth ends (the server's is the spec's ``interface``) and dnsmasq."""

    server_ns: str
    client_ns: str
    server_if: str
    client_if: str
    dnsmasq: subprocess.Popen[bytes] | None = None

    def client(self, *args: str, wait: float = 1.0) -> dict[str, object] | None:
        """Run the stdlib DHCP client in the node's namespace; its answer, or None."""
        argv = ["ip", "netns", "exec", self.client_ns, sys.executable, "-m", "tests.provision.dhcp_client",
                args[0], self.client_if, *args[1:], "--wait", str(wait)]  # fmt: skip
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30, check=True).stdout
        return json.loads(out) if out.strip() else None

    def in_client(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["ip", "netns", "exec", self.client_ns, *argv], capture_output=True, timeout=30)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def leftovers(net: BootNetwork) -> list[str]:
    """What of ``net`` still exists: namespaces, veth ends in this namespace, the dnsmasq process."""
    found: list[str] = []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found += [ns for ns in (net.server_ns, net.client_ns) if ns in names.split()]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found += [name for name in (net.server_if, net.client_if) if f" {name}@" in links or f" {name}:" in links]
    if net.dnsmasq is not None and net.dnsmasq.poll() is None:
        found.append(f"dnsmasq pid {net.dnsmasq.pid}")
    return found


def _wait_listening(net: BootNetwork, log: Path) -> None:
    """Until dnsmasq logs that its DHCP sockets are bound (or it dies: then its log in the error)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert net.dnsmasq is not None
        if net.dnsmasq.poll() is not None:
            raise RuntimeError(f"dnsmasq exited {net.dnsmasq.returncode}: {log.read_text()}")
        if log.exists() and "TFTP root is" in log.read_text():
            return
        time.sleep(0.05)
    raise RuntimeError(f"dnsmasq did not start within 5 s: {log.read_text() if log.exists() else ''}")


@contextlib.contextmanager
def boot_network(suffix: str) -> Iterator[BootNetwork]:
    """The namespaces and veth pair, the server end up at :data:`SERVER_ADDRESS`, the node's end up
    without an address; removed when the block ends."""
    net = BootNetwork(f"gfs{suffix}", f"gfc{suffix}", f"gfs{suffix}", f"gfc{suffix}")
    try:
        _ip("netns", "add", net.server_ns)
        _ip("netns", "add", net.client_ns)
        _ip("link", "add", net.server_if, "netns", net.server_ns, "type", "veth",
            "peer", "name", net.client_if, "netns", net.client_ns)  # fmt: skip
        _ip("-n", net.server_ns, "addr", "add", SERVER_ADDRESS, "dev", net.server_if)
        for ns, dev in ((net.server_ns, net.server_if), (net.client_ns, net.client_if)):
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        yield net
    finally:
        stop_dnsmasq(net)
        for ns in (net.client_ns, net.server_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def start_dnsmasq(net: BootNetwork, conf: Path, work: Path) -> None:
    """The installed dnsmasq with the rendered configuration, in the foreground, its pid file, lease
    file and log in ``work``."""
    log = work / "dnsmasq.log"
    files = [f"--pid-file={work / 'dnsmasq.pid'}", f"--dhcp-leasefile={work / 'leases'}", f"--log-facility={log}"]
    argv = ["ip", "netns", "exec", net.server_ns, DNSMASQ, "--keep-in-foreground", f"--conf-file={conf}", *files]
    net.dnsmasq = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_listening(net, log)


def stop_dnsmasq(net: BootNetwork) -> None:
    proc = net.dnsmasq
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
