"""The hardware reading: slurmd -C's figures from sysfs and /proc, real output and hostile output alike."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpuforge.probes.hardware import HARDWARE, HARDWARE_COMMAND, MAX_LINES, cpu_list, parse_hardware, read_hardware

RECORDED = Path(__file__).parent / "fixtures" / "platform" / "hardware_vm_2cpu.json"


def hgx(allowed: str = "0-223", offline: tuple[int, ...] = ()) -> list[str]:
    """A crafted 2-socket HGX H100 host: 56 cores a socket, 2 threads a core (CPU n and n+112 are
    siblings, as Linux numbers them), 8 H100 SXM (10de:2330), 4 NVSwitches (10de:22a3), 2 NUMA nodes."""
    cpus = []
    for n in range(224):
        core = n % 112
        package = core // 56
        cpus.append(f"cpu{n} {0 if n in offline else 1} {package} {core},{core + 112}")
    gpus = [f"0000:{b:02x}:00.0 0x030200 0x10de 0x2330" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]
    switches = [f"0000:{b:02x}:00.0 0x068000 0x10de 0x22a3" for b in (0x05, 0x06, 0x07, 0x08)]
    return [
        "__section=allowed", f"Cpus_allowed_list:\t{allowed}",
        "__section=cpu", *cpus,
        "__section=memory", "MemTotal:       2113290240 kB",
        "__section=numa", "node0", "node1",
        "__section=pci", "0000:00:00.0 0x060000 0x8086 0x09a2", *gpus, *switches,
        "__section=net", "eno1", "ibp24s0",
        "__section=ib", "mlx5_0", "mlx5_1",
        "__section=block", "nvme0n1 7501476528",
        "__rc=0",
    ]  # fmt: skip


def test_the_recorded_machine_reads_as_slurmd_would_count_it() -> None:
    data = json.loads(RECORDED.read_text())
    info = parse_hardware(data["output"])
    assert (info["cpus"], info["sockets"], info["cores_per_socket"], info["threads_per_core"]) == (2, 1, 2, 1)
    assert info["memory_mb"] == 24684092 // 1024 == 24105
    assert info["errors"] == [] and info["gpus"] == {}


def test_this_machine_in_process_and_through_the_shell_read_the_same() -> None:
    shell = subprocess.run(["/bin/sh", "-c", HARDWARE_COMMAND], capture_output=True, text=True, check=True)
    assert read_hardware() == shell.stdout.splitlines()
    assert HARDWARE.command() == HARDWARE_COMMAND


def test_an_hgx_host() -> None:
    info = parse_hardware(hgx())
    assert {k: info[k] for k in ("cpus", "sockets", "cores_per_socket", "threads_per_core", "memory_mb")} == {
        "cpus": 224, "sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "memory_mb": 2063760}  # fmt: skip
    assert info["gpus"] == {"2330": 8}  # NVSwitches are bridges, not GPUs
    assert (info["numa_nodes"], info["nics"], info["hcas"]) == (2, ["eno1", "ibp24s0"], ["mlx5_0", "mlx5_1"])
    assert info["disks"] == [{"name": "nvme0n1", "size_gb": 3840}] and info["errors"] == []


def test_only_online_and_allowed_cpus_count() -> None:
    info = parse_hardware(hgx(allowed="0-55,112-167"))
    assert (info["cpus"], info["sockets"], info["cores_per_socket"], info["threads_per_core"]) == (112, 1, 56, 2)
    off = parse_hardware(hgx(offline=tuple(range(112, 224))))  # SMT switched off
    assert (off["cpus"], off["sockets"], off["cores_per_socket"], off["threads_per_core"]) == (112, 2, 56, 1)


def test_cpu_lists() -> None:
    assert cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert cpu_list("3-1") is None and cpu_list("x") is None and cpu_list("0-9999999") is None


def test_hostile_output_is_an_error_never_a_figure() -> None:
    hostile = parse_hardware(["__section=cpu", "cpu0 1 0 \x1b[31m", "rm -rf /", "__section=memory", "MemTotal: lots"])
    assert hostile["cpus"] == 0 and hostile["memory_mb"] == 0
    assert "no MemTotal in /proc/meminfo" in hostile["errors"]
    assert any(e.startswith("cpu line not understood") for e in hostile["errors"])
    flood = parse_hardware(["__section=numa", *(["node0"] * (MAX_LINES + 5))])
    assert f"more than {MAX_LINES} lines: the rest was not read" in flood["errors"]
    names = parse_hardware(["__section=net", "eth0", "bad\x07name", "x" * 200, "__section=ib", "../../etc"])
    assert names["nics"] == ["eth0"] and names["hcas"] == []
    assert parse_hardware([])["errors"]  # nothing read is not zero CPUs
