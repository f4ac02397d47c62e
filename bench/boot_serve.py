"""Benchmark: the provisioning server's HTTP side serving N network-booting nodes at once, on loopback.

Issue 51 asks how many nodes one provisioning server boots at once and what limits it. Each simulated
node does what iPXE does after DHCP (``gpuforge provision --serve``'s rendered script): GET its own
iPXE script, then the group's kernel, then its initrd, one after the other, each as HTTP/1.0 on a new
connection read to the end (the server's Content-Length checked). All N start together. The server
is gpuforge's own HTTP child, started as ``--serve`` starts it (``python -I -c CHILD_CODE``, the
listening socket bound here and passed by descriptor, the URL->file map on stdin), with its request
log kept in a file. The clients are one asyncio loop in this process, so on a small machine they share
the CPU with the server: the figures are the server's floor, not a NIC's.

The files are random bytes of the sizes of the Debian 12 generic kernel (vmlinuz-6.1.0, 8,247,232
bytes) and the initramfs of the image baked here (30,231,551 bytes), as in the lab's VM boxes
(``--kernel-bytes`` and ``--initrd-bytes`` change them). Per N: wall time, aggregate throughput,
per-node time (median, 95th percentile, slowest), failed nodes and why, the server's CPU seconds
and its peak thread count.

Run: ``python bench/boot_serve.py [--nodes 1,10,100,250,500,1000]`` (no root needed; loopback only).
Writes ``bench/results/boot_serve.{txt,json}`` and the plot ``boot_serve.png`` (``--no-plot`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuforge.provision import http, serve  # noqa: E402

RESULTS = REPO / "bench" / "results"
KERNEL_BYTES = 8_247_232
INITRD_BYTES = 30_231_551
#: How long one node may take for its three files before it counts as failed.
NODE_TIMEOUT_S = 600.0
READ_CHUNK = 1 << 20


@dataclass
class Run:
    nodes: int
    wall_s: float = 0.0
    bytes_total: int = 0
    throughput_mb_s: float = 0.0
    node_median_s: float = 0.0
    node_p95_s: float = 0.0
    node_max_s: float = 0.0
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    server_cpu_s: float = 0.0
    server_peak_threads: int = 0
    requests_logged: int = 0


def make_files(folder: Path, nodes: int, kernel_bytes: int, initrd_bytes: int) -> dict[str, Path]:
    """The route map: one iPXE script per node, one kernel and one initrd (random bytes)."""
    kernel, initrd = folder / "vmlinuz", folder / "initrd.img"
    for path, size in ((kernel, kernel_bytes), (initrd, initrd_bytes)):
        with path.open("wb") as f:
            left = size
            while left:
                chunk = os.urandom(min(left, 1 << 22))
                f.write(chunk)
                left -= len(chunk)
    routes = {"/images/compute/vmlinuz": kernel, "/images/compute/initrd.img": initrd}
    for i in range(nodes):
        script = folder / f"node{i:04d}.ipxe"
        script.write_text(f"#!ipxe\nkernel http://127.0.0.1/images/compute/vmlinuz\ninitrd {i}\nboot\n")
        routes[f"/ipxe/node{i:04d}.ipxe"] = script
    return routes


def start_server(routes: dict[str, Path], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """gpuforge's HTTP child on a loopback port, started as ``provision --serve`` starts it."""
    listener = http.listening("127.0.0.1", 0)
    port = listener.getsockname()[1]
    with log.open("wb") as err:  # serve.http_child would pass each request line on to this terminal
        proc = subprocess.Popen(serve.http_argv(listener.fileno()), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=err, pass_fds=(listener.fileno(),))  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(serve.http_table(routes))
    proc.stdin.close()
    listener.close()
    deadline = time.monotonic() + 30
    while b"serving" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the HTTP child did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return proc, port


async def fetch(port: int, path: str) -> int:
    """GET ``path`` over HTTP/1.0; the body's length, checked against Content-Length."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nUser-Agent: iPXE/1.21.1\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status:
            raise OSError(f"status {status.decode(errors='replace')}")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        got = 0
        while chunk := await reader.read(READ_CHUNK):
            got += len(chunk)
        if got != length:
            raise OSError(f"short body: {got} of {length} bytes")
        return got
    finally:
        writer.close()


async def boot(port: int, i: int, start: asyncio.Event) -> tuple[float, int, str | None]:
    """One node: its script, the kernel, the initrd. (seconds, bytes, failure or None)."""
    await start.wait()
    t0 = time.monotonic()
    total = 0
    try:
        async with asyncio.timeout(NODE_TIMEOUT_S):
            for path in (f"/ipxe/node{i:04d}.ipxe", "/images/compute/vmlinuz", "/images/compute/initrd.img"):
                total += await fetch(port, path)
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
        return time.monotonic() - t0, total, type(e).__name__ + (f": {e}" if str(e) else "")
    return time.monotonic() - t0, total, None


class ServerWatch:
    """The server process's CPU seconds and peak thread count, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_threads, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.wait(0.2):
            try:
                threads = int(Path(f"/proc/{self.pid}/status").read_text().split("Threads:")[1].split()[0])
            except (OSError, IndexError, ValueError):
                return
            self.peak_threads = max(self.peak_threads, threads)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def all_boot(port: int, nodes: int) -> tuple[float, list[tuple[float, int, str | None]]]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(boot(port, i, start)) for i in range(nodes)]
    await asyncio.sleep(0.1)
    t0 = time.monotonic()
    start.set()
    results = await asyncio.gather(*tasks)
    return time.monotonic() - t0, list(results)


def measure(nodes: int, kernel_bytes: int, initrd_bytes: int) -> Run:
    with tempfile.TemporaryDirectory(prefix="gf-boot-serve-") as tmp:
        folder = Path(tmp)
        routes = make_files(folder, nodes, kernel_bytes, initrd_bytes)
        proc, port = start_server(routes, folder / "http.log")
        watch = ServerWatch(proc.pid)
        try:
            cpu0 = watch.cpu_s()
            watch.thread.start()
            wall, results = asyncio.run(all_boot(port, nodes))
            cpu = watch.cpu_s() - cpu0
        finally:
            watch.stop.set()
            proc.terminate()
            proc.wait(timeout=30)
        run = Run(nodes, wall_s=round(wall, 2), server_cpu_s=round(cpu, 2), server_peak_threads=watch.peak_threads)
        times = sorted(t for t, _, failure in results if failure is None)
        run.bytes_total = sum(b for _, b, _ in results)
        run.throughput_mb_s = round(run.bytes_total / wall / 1e6, 1)
        for _, _, failure in results:
            if failure is not None:
                run.failed += 1
                run.failures[failure] = run.failures.get(failure, 0) + 1
        if times:
            run.node_median_s = round(statistics.median(times), 2)
            run.node_p95_s = round(times[min(len(times) - 1, int(0.95 * len(times)))], 2)
            run.node_max_s = round(times[-1], 2)
        run.requests_logged = sum(
            1 for line in (folder / "http.log").read_text(errors="replace").splitlines() if '"GET ' in line
        )
        return run


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    n = [r.nodes for r in runs]
    left.plot(n, [r.wall_s for r in runs], "o-", label="all nodes booted (wall)")
    left.plot(n, [r.node_median_s for r in runs], "s--", label="median node")
    left.set_xscale("log")
    left.set_xlabel("nodes booting at once")
    left.set_ylabel("seconds")
    left.legend()
    right.plot(n, [r.throughput_mb_s for r in runs], "o-")
    right.set_xscale("log")
    right.set_xlabel("nodes booting at once")
    right.set_ylabel("MB/s served (loopback)")
    fig.suptitle("gpuforge provision --serve: kernel + initrd to N iPXE clients")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", default="1,10,100,250,500,1000", help="comma-separated node counts")
    ap.add_argument("--kernel-bytes", type=int, default=KERNEL_BYTES)
    ap.add_argument("--initrd-bytes", type=int, default=INITRD_BYTES)
    ap.add_argument("--no-plot", action="store_true", help="no boot_serve.png (no matplotlib needed)")
    args = ap.parse_args()
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("the plot needs matplotlib: pip install '.[bench]' (or --no-plot)")
    try:
        counts = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        ap.error(f"--nodes: comma-separated whole numbers, not {args.nodes!r}")
    if not counts or min(counts) < 1:
        ap.error("--nodes: each count at least 1")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(counts) * 2 + 64 > soft:  # each node holds a socket here and one in the server
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(counts) * 4), hard))
    runs = []
    for n in counts:
        run = measure(n, args.kernel_bytes, args.initrd_bytes)
        print(f"{n:5d} nodes: {run.wall_s:7.1f} s, {run.throughput_mb_s:7.1f} MB/s, node median {run.node_median_s} s, "
              f"p95 {run.node_p95_s} s, failed {run.failed} {run.failures or ''}, server CPU {run.server_cpu_s} s, "
              f"threads {run.server_peak_threads}", flush=True)  # fmt: skip
        runs.append(run)
    RESULTS.mkdir(exist_ok=True)
    doc: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "files": {"kernel_bytes": args.kernel_bytes, "initrd_bytes": args.initrd_bytes},
        "date": time.strftime("%Y-%m-%d"),
        "runs": [asdict(r) for r in runs],
    }
    (RESULTS / "boot_serve.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["nodes  wall_s  MB/s  node_median_s  node_p95_s  node_max_s  failed  server_cpu_s  threads"]
    lines += [f"{r.nodes:5d} {r.wall_s:7.1f} {r.throughput_mb_s:6.0f} {r.node_median_s:13.2f} {r.node_p95_s:11.2f} "
              f"{r.node_max_s:11.2f} {r.failed:7d} {r.server_cpu_s:13.1f} {r.server_peak_threads:8d}"
              for r in runs]  # fmt: skip
    (RESULTS / "boot_serve.txt").write_text("\n".join(lines) + "\n")
    if not args.no_plot:
        plot(runs, RESULTS / "boot_serve.png")


if __name__ == "__main__":
    main()
