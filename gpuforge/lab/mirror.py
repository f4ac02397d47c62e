"""The lab's site package mirror: apt-cacher-ng bound to the bridge address, port 3142.

It runs with its own config dir (``<state>/mirror/conf``), log dir and cache dir
(``/var/cache/gpuforge/acng/<name>``, kept across ``down`` so the mirror stays warm). Its Debian
backends are the host's own apt sources; ``ForceManaged`` makes it refuse any other URL, so the
nodes (which have no route out) reach packages only through it, like an air-gapped site mirror.
Nodes use it as an HTTP proxy; it also answers direct URLs ``http://<bridge>:3142/debian`` and
``http://<bridge>:3142/debian-security``.
"""

from __future__ import annotations

import os
import socket
import time

from . import plan
from .sources import HostMirrors, as_http, host_path
from .system import LabError, Proc, processes, spawn_detached, stop_processes, write_file


def conf_dir(mirror_dir: str) -> str:
    return os.path.join(mirror_dir, "conf")


def acng_conf(address: str, mirrors: HostMirrors, cache_dir: str, mirror_dir: str) -> str:
    """The ``acng.conf`` of a lab mirror."""
    deb_prefixes = " ".join(sorted({"/debian", host_path(as_http(mirrors.debian))}))
    sec_prefixes = " ".join(sorted({"/debian-security", host_path(as_http(mirrors.security))}))
    return "\n".join(
        [
            "# Written by gpuforge lab: site mirror of this lab only.",
            f"CacheDir: {cache_dir}",
            f"LogDir: {os.path.join(mirror_dir, 'log')}",
            "SupportDir: /usr/lib/apt-cacher-ng",
            f"BindAddress: {address}",
            f"Port: {plan.MIRROR_PORT}",
            f"SocketPath: {os.path.join(mirror_dir, 'acng.socket')}",
            f"PidFile: {os.path.join(mirror_dir, 'acng.pid')}",
            "ForeGround: 1",
            "ForceManaged: 1",
            "ExThreshold: 4",
            # Upstream stalls must not stall the nodes: give up on a silent upstream after 30 s,
            # and answer index requests from the cache for 10 minutes instead of re-asking
            # upstream for every node of a lab that updates at once.
            "NetworkTimeout: 30",
            "FreshIndexMaxAge: 600",
            "ReportPage: acng-report.html",
            f"Remap-gfsecurity: {sec_prefixes} ; {mirrors.security.rstrip('/')}/",
            f"Remap-gfdebian: {deb_prefixes} ; {mirrors.debian.rstrip('/')}/",
            "",
        ]
    )


def mirror_processes(mirror_dir: str) -> list[Proc]:
    """apt-cacher-ng processes started with this lab's config dir."""
    cdir = conf_dir(mirror_dir)
    return processes(lambda argv: os.path.basename(argv[0]) == "apt-cacher-ng" and cdir in argv)


def listening(address: str, port: int, timeout: float = 1.0) -> bool:
    """True if a TCP connect to ``address:port`` succeeds."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def listening_inodes(address: str, port: int) -> set[str]:
    """Socket inodes listening on ``address:port`` (or on all addresses) per /proc/net/tcp."""
    want = {socket.inet_aton(address)[::-1].hex().upper() + f":{port:04X}", f"00000000:{port:04X}"}
    out: set[str] = set()
    try:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[1] in want and fields[3] == "0A":
                    out.add(fields[9])
    except OSError:
        pass
    return out


def owns_port(pids: list[int], address: str, port: int) -> bool:
    """True if one of ``pids`` holds the listening socket on ``address:port``."""
    inodes = {f"socket:[{i}]" for i in listening_inodes(address, port)}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return True
            except OSError:
                continue
    return False


def mirror_ok(address: str, mirror_dir: str) -> bool:
    """Our apt-cacher-ng runs and it (not something else) listens on the bridge address."""
    pids = [p.pid for p in mirror_processes(mirror_dir)]
    return bool(pids) and owns_port(pids, address, plan.MIRROR_PORT) and listening(address, plan.MIRROR_PORT)


def start_mirror(address: str, mirrors: HostMirrors, cache_dir: str, mirror_dir: str, timeout: float = 15) -> None:
    """(Re)start the lab's apt-cacher-ng and wait until it listens."""
    stop_mirror(mirror_dir)
    os.makedirs(os.path.join(mirror_dir, "log"), exist_ok=True)
    os.makedirs(cache_dir, exist_ok=True)
    write_file(os.path.join(conf_dir(mirror_dir), "acng.conf"), acng_conf(address, mirrors, cache_dir, mirror_dir))
    out = os.path.join(mirror_dir, "log", "stdout.log")
    spawn_detached(["apt-cacher-ng", "-c", conf_dir(mirror_dir)], out)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        pids = [p.pid for p in mirror_processes(mirror_dir)]
        if pids and owns_port(pids, address, plan.MIRROR_PORT) and listening(address, plan.MIRROR_PORT, 0.5):
            return
        if not pids:
            break
    raise LabError(
        f"site mirror (apt-cacher-ng) did not start listening on {address}:{plan.MIRROR_PORT}; "
        f"is port {plan.MIRROR_PORT} taken (`ss -ltnp`)? See {out} and {os.path.join(mirror_dir, 'log')}"
    )


def stop_mirror(mirror_dir: str) -> list[int]:
    """Stop this lab's apt-cacher-ng processes; return their pids."""
    pids = [p.pid for p in mirror_processes(mirror_dir)]
    stop_processes(pids, timeout=5)
    return pids
