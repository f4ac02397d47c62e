"""The fabric pair test, pure part: which nodes pair, the perftest and nccl-tests command lines, reading
their output and judging it. Running it is :mod:`gpuforge.validator.cluster_fabric`.

Pairs: per node group and leaf switch (the whole group where it names none), the nodes in spec
order form a ring, ``n0 -> n1 -> ... -> n0`` (server -> client; two nodes: one pair). The ring's
pairs run in rounds in which no node is in two pairs (:func:`rounds`), so no NIC serves two tests
at once. In a pair the server (``ib_write_bw`` without an address) starts first; the client retries
while perftest says ``Couldn't connect to <server>:<port>`` (the server is not listening yet), up to
:data:`CONNECT_WINDOW_S`; every run is bounded by ``timeout``. The client's table is judged: on a
unidirectional test the client measures the bandwidth (perftest README, "Notes on Testing
Methodology"), and the latency server prints none.

Every flag and output format is in :data:`SOURCES`; a spec value reaches a command only as a
checked device name, an integer or an address, and quoted for ``sh``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from gpuforge.spec import fabric_packages as table
from gpuforge.spec.citation import Citation

SOURCES: dict[str, Citation] = {
    "perftest-flags": Citation(
        "perftest README (5. Running Tests) and man/perftest.1, github.com/linux-rdma/perftest "
        "(commit 00b55b6660d0170dabe2c1b49193e8fbe265086e)",
        "https://github.com/linux-rdma/perftest",
        "'Server: ./<test name> <options>', 'Client: ./<test name> <options> <server IP address>', 'The SAME "
        "OPTIONS must be passed to both server and client'; '-d, --ib-dev=<dev>', '-i, --ib-port=<port>', "
        "'-x, --gid-index=<index>', '-F, --CPU-freq Do not show a warning even if cpufreq_ondemand module is "
        "loaded', '-D, --duration Run test for a customized period of seconds', '--report_gbits Report Max/Average "
        "BW of test in Gbit/sec (instead of MiB/sec)'; 'the client measures the bandwidth'; src/perftest_parameters.c "
        "usage(): '-n, --iters=<iters> Number of exchanges (at least %d, default %d) (SYMMETRIC)' with MIN_ITER 5, "
        "MAX_ITER 4294967296, DEF_ITERS_WB 5000 (src/perftest_parameters.h)",
    ),
    "perftest-output": Citation(
        "perftest src/perftest_parameters.h RESULT_FMT_G and RESULT_FMT_LAT; src/perftest_communication.c",
        "https://github.com/linux-rdma/perftest/blob/master/src/perftest_parameters.h",
        "' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]'; ' #bytes #iterations "
        "t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% "
        "percentile[usec]'; with -D a latency test prints only t_avg (RESULT_FMT_LAT_DUR; perftest issue #80), so "
        "ib_read_lat runs its default iterations; a client with no server: 'Couldn't connect to %s:%d'",
    ),
    "nccl-tests": Citation(
        "NVIDIA/nccl-tests README.md (Arguments); srun(1) --mpi, -w, --ntasks-per-node, --gres",
        "https://github.com/NVIDIA/nccl-tests",
        "'-b,--minbytes', '-e,--maxbytes', '-f,--stepfactor', '-g,--ngpus <GPUs per thread>'; 'NCCL tests rely on "
        "MPI to work on multiple processes, hence multiple nodes'; one rank per GPU through srun --mpi",
    ),
}

WRITE_BW, READ_LAT, NCCL = "write_bw", "read_lat", "nccl"
WRITE_SECONDS = 5
#: How long a client keeps retrying while its server is not listening yet. Both sides' sessions start
#: together, and the server's may start late by the transport's two tries of ssh's ConnectTimeout
#: (``runner.SSH_CONNECT_TIMEOUT_S``: 10 s each, a second after the first) on a busy node, then sudo and
#: perftest's own start (over 21 s in all; the window was 20 s).
CONNECT_WINDOW_S = 60
#: A perftest run's own setup and teardown, on top of its test time.
SETUP_S = 30
NCCL_TIMEOUT_S = 300
NCCL_MAX_BYTES = "1G"
NOT_LISTENING = "Couldn't connect to"
#: all_reduce_perf as the fabric layer builds it (``fabric_packages``: nccl-tests in <dir>/current/build).
ALL_REDUCE_PERF = f"{table.NCCL_TESTS_DIR}/current/build/{table.NCCL_TESTS_BINARY}"
_DEVICE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)" + r"\s+([\d.]+)" * 7 + r"\s*$")


@dataclass(frozen=True)
class Endpoint:
    """One node's side of a pair: its RDMA device, port and GID index (from ``fabric.ports``), and the
    address its server is reached at."""

    node: str
    device: str
    port: int
    gid_index: int
    address: str


@dataclass
class PairResult:
    """What one pair measured (None: not measured) and what went wrong."""

    server: str
    client: str
    write_gbps: float | None = None
    read_lat_us: float | None = None
    nccl_busbw_gbps: float | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.server}->{self.client}"


def ring(nodes: list[str]) -> list[tuple[str, str]]:
    """``n0->n1, n1->n2, ..., n(k-1)->n0`` (two nodes: the one pair; fewer: none)."""
    if len(nodes) < 2:
        return []
    if len(nodes) == 2:
        return [(nodes[0], nodes[1])]
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``pairs`` in rounds where no node is in two pairs (each pair in the first round it fits)."""
    out: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for a, b in pairs:
        i = next((i for i, nodes in enumerate(busy) if a not in nodes and b not in nodes), len(out))
        if i == len(out):
            out.append([])
            busy.append(set())
        out[i].append((a, b))
        busy[i] |= {a, b}
    return out


def endpoint(node: str, address: str, ports: dict[str, Any]) -> Endpoint | None:
    """The node's first fabric device as ``fabric.ports`` chose it (None: it chose none, or a bad name)."""
    for device, chosen in ports.items():
        if isinstance(chosen, dict) and _DEVICE.match(str(device)):
            ipv4 = chosen.get("ipv4")
            return Endpoint(node, str(device), int(chosen.get("port") or 1), int(chosen.get("gid_index") or 0),
                            str(ipv4) if ipv4 else address)  # fmt: skip
    return None


def _perftest(tool: str, ep: Endpoint, extra: str) -> str:
    return f"{tool} -d {shlex.quote(ep.device)} -i {ep.port} -x {ep.gid_index} -F{extra}"


def write_length(seconds: int, iterations: int | None) -> str:
    """ib_write_bw's run length, the same on both sides (perftest: SYMMETRIC): ``-n`` writes, else ``-D`` seconds."""
    return f" --report_gbits -n {iterations}" if iterations is not None else f" --report_gbits -D {seconds}"


def server_script(
    ep: Endpoint, seconds: int = WRITE_SECONDS, window: int = CONNECT_WINDOW_S, iterations: int | None = None
) -> str:
    """The server side: ``ib_write_bw`` then ``ib_read_lat``, each waiting for its client, each bounded."""
    bound = window + seconds + SETUP_S
    return "\n".join([
        f"echo __section={WRITE_BW}",
        f"timeout {bound} {_perftest('ib_write_bw', ep, write_length(seconds, iterations))} 2>&1; echo \"__rc=$?\"",
        f"echo __section={READ_LAT}",
        f"timeout {bound} {_perftest('ib_read_lat', ep, '')} 2>&1; echo \"__rc=$?\"",
    ])  # fmt: skip


def _retry(window: int) -> str:
    """``try_client CMD...``: run CMD until it exits 0 or says its server is not listening, for ``window`` s."""
    return (
        "try_client() {\n"
        f"  end=$(( $(date +%s) + {window} )); n=0\n"
        "  while :; do\n"
        '    out=$("$@" 2>&1); rc=$?; n=$((n + 1))\n'
        f'    if [ "$rc" -eq 0 ] || ! printf \'%s\\n\' "$out" | grep -q "{NOT_LISTENING}"; then break; fi\n'
        '    [ "$(date +%s)" -ge "$end" ] && break\n'
        "    sleep 1\n"
        "  done\n"
        '  printf \'%s\\n\' "$out"; echo "__rc=$rc"; echo "__tries=$n"\n'
        "}"
    )


def client_script(
    ep: Endpoint, server: Endpoint, seconds: int = WRITE_SECONDS, window: int = CONNECT_WINDOW_S,
    iterations: int | None = None,
) -> str:  # fmt: skip
    """The client side: each test retried while its server is not listening yet (``window`` s), each run bounded."""
    bound = seconds + SETUP_S
    to = shlex.quote(server.address)
    return "\n".join([
        _retry(window),
        f"echo __section={WRITE_BW}",
        f"try_client timeout {bound} {_perftest('ib_write_bw', ep, write_length(seconds, iterations))} {to}",
        f"echo __section={READ_LAT}",
        f"try_client timeout {SETUP_S} {_perftest('ib_read_lat', ep, '')} {to}",
    ])  # fmt: skip


def nccl_command(server: str, client: str, gpus: int, partition: str | None) -> str:
    """all_reduce_perf across the pair from the Slurm controller: one rank per GPU, MPI through srun."""
    part = f" -p {shlex.quote(partition)}" if partition else ""
    return (
        f"timeout {NCCL_TIMEOUT_S} srun -N2 -w {shlex.quote(server)},{shlex.quote(client)}{part} "
        f"--ntasks-per-node={gpus} --gres=gpu:{gpus} --mpi=pmix -J gpuforge-validate "
        f'{ALL_REDUCE_PERF} -b 8 -e {NCCL_MAX_BYTES} -f 2 -g 1 2>&1; echo "__rc=$?"'
    )


# --------------------------------------------------------------------------- reading the output


def split_sections(text: str) -> dict[str, tuple[int | None, list[str]]]:
    """``__section=<name>`` blocks: (the ``__rc=`` in it, its other lines)."""
    out: dict[str, tuple[int | None, list[str]]] = {}
    name: str | None = None
    rc: int | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "__section="]:
        if line.startswith("__section="):
            if name:
                out[name] = (rc, lines)
            name, rc, lines = line.split("=", 1)[1].strip(), None, []
        elif line.startswith("__rc="):
            rc = int(line[5:]) if line[5:].strip().lstrip("-").isdigit() else None
        elif not line.startswith("__tries="):
            lines.append(line)
    return out


def parse_write_bw(lines: list[str]) -> float | None:
    """``BW average[Gb/sec]`` of the row under ``ib_write_bw --report_gbits``'s header (None: no such row)."""
    header = next((i for i, line in enumerate(lines) if "BW average[Gb/sec]" in line), None)
    if header is None:
        return None
    row = next((m for line in lines[header + 1 :] if (m := _BW_ROW.match(line))), None)
    return float(row.group(4)) if row else None


def parse_read_lat(lines: list[str]) -> float | None:
    """``t_typical[usec]`` of the row under ``ib_read_lat``'s header (None: no such row)."""
    header = next((i for i, line in enumerate(lines) if "t_typical[usec]" in line), None)
    if header is None:
        return None
    row = next((m for line in lines[header + 1 :] if (m := _LAT_ROW.match(line))), None)
    return float(row.group(5)) if row else None


#: A line of perftest's that says why it stopped (its messages: "Couldn't ...", "Failed to ...",
#: "Unable to ...", "Completion with error ...", "Problems with warm up").
_WHY = re.compile(r"(?i)\b(couldn't|could not|failed|unable|error|problems?|not supported)\b")


def _tail(lines: list[str], keep: int = 2) -> str:
    """Why perftest stopped, at most 200 characters: its last ``keep`` lines that say so, else its last
    ``keep`` lines that say something (rules of dashes left out). perftest writes its errors to stderr
    at once and its tables to stdout, which a pipe buffers until exit: the error comes first, the
    table's header last."""
    said = [x.strip() for x in lines if x.strip().strip("-*")]
    why = [x for x in said if _WHY.search(x)]
    return " | ".join((why or said)[-keep:])[-200:] or "no output"


def judge_perftest(result: PairResult, client_out: str, server_out: str, limits: dict[str, float | None]) -> None:
    """Fill ``result`` from both sides' output: the client's tables, against ``limits``."""
    client, server = split_sections(client_out), split_sections(server_out)
    for test, parse, what, unit in ((WRITE_BW, parse_write_bw, "ib_write_bw", "Gb/s"),
                                    (READ_LAT, parse_read_lat, "ib_read_lat", "us")):  # fmt: skip
        rc, lines = client.get(test, (None, []))
        value = parse(lines) if rc == 0 else None
        if value is None:
            s_rc, s_lines = server.get(test, (None, []))
            why = "the server was not reached" if NOT_LISTENING in "\n".join(lines) else f"exit {rc}"
            result.problems.append(f"{what} {why}: {_tail(lines)} (server exit {s_rc}: {_tail(s_lines, 1)})")
            continue
        if test == WRITE_BW:
            result.write_gbps = value
            low = limits.get("write_bw_gbps")
            if low is not None and value < low:
                result.problems.append(f"ib_write_bw {value:g} {unit}, below the spec's {low:g}")
        else:
            result.read_lat_us = value
            high = limits.get("read_lat_us")
            if high is not None and value > high:
                result.problems.append(f"ib_read_lat t_typical {value:g} {unit}, above the spec's {high:g}")


def describe(result: PairResult) -> str:
    """One pair in a line: what it measured, then its problems and notes."""
    words = []
    if result.write_gbps is not None:
        words.append(f"write {result.write_gbps:g} Gb/s")
    if result.read_lat_us is not None:
        words.append(f"read lat {result.read_lat_us:g} us")
    if result.nccl_busbw_gbps is not None:
        words.append(f"NCCL busbw {result.nccl_busbw_gbps:g} GB/s")
    text = f"{result.name}: {', '.join(words) or 'nothing measured'}"
    extra = result.problems + result.notes
    return text + (f" ({'; '.join(extra)})" if extra else "")
