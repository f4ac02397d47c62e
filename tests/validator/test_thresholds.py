"""Every numeric threshold of the validator, at its boundary: the last value that passes and the first
that fails (one uncorrected ECC error, not only two). The Xid list's limit is in test_xid_catalog.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.spec import resolve_nodes
from gpuforge.validator import cluster_k8s, runner
from gpuforge.validator.node import drain, inputs
from gpuforge.validator.node.base import FAIL, MAX_REASON, PASS
from gpuforge.validator.node.framework import Result
from tests.helpers import variant

from .vhelpers import gpu_cfg, hgx_outputs, output, run, slurm_cfg

SMI = output("nvidia/smi_gpus_8x_h100_hgx")
# a data line of the capture: index, uuid, name, bus id, driver, persistence, memory, ECC, width now, width max, ...
FIELDS = {"ecc": 7, "width_current": 8, "width_max": 9}


def smi_with(gpu: int, **values: str) -> list[str]:
    """The 8 x H100 capture with some fields of one GPU changed."""
    lines = []
    for line in SMI:
        cells = line.split(", ")
        if line.startswith(f"{gpu}, "):
            for name, value in values.items():
                cells[FIELDS[name]] = value
        lines.append(", ".join(cells))
    return lines


def status(cfg: dict[str, Any], check: str, **outputs: list[str]) -> tuple[str, str]:
    r = run(cfg, hgx_outputs(**outputs), [check])[check]
    return r.status, r.message


def test_one_uncorrected_ecc_error_fails_none_passes() -> None:
    assert status(gpu_cfg(), "gpu.ecc", smi=smi_with(3, ecc="0"))[0] == PASS
    assert status(gpu_cfg(), "gpu.ecc", smi=smi_with(3, ecc="1")) == (FAIL, "uncorrected volatile ECC errors: GPU 3: 1")


def test_a_link_one_lane_short_fails_full_width_passes() -> None:
    assert status(gpu_cfg(), "gpu.pcie_width", smi=smi_with(2, width_current="16", width_max="16"))[0] == PASS
    assert status(gpu_cfg(), "gpu.pcie_width", smi=smi_with(2, width_current="15", width_max="16")) == (
        FAIL,
        "PCIe link degraded: GPU 2: x15 of x16",
    )


@pytest.mark.parametrize(("declared", "want"), [(7, FAIL), (8, PASS), (9, FAIL)])
def test_the_gpu_count_must_match_exactly(declared: int, want: str) -> None:
    assert status(gpu_cfg(count=declared), "hardware.gpu_count")[0] == want


@pytest.mark.parametrize(("listed", "want"), [(7, FAIL), (8, PASS)])
def test_nvidia_smi_must_list_every_declared_gpu(listed: int, want: str) -> None:
    smi = [line for line in SMI if not line[:1].isdigit() or int(line.split(",")[0]) < listed]
    assert status(gpu_cfg(), "driver.smi", smi=smi)[0] == want


def test_one_inactive_nvlink_fails() -> None:
    nvlink = output("nvidia/nvlink_h100_hgx_all_active")
    first_link = next(i for i, line in enumerate(nvlink) if line.strip().startswith("Link "))
    one_down = [*nvlink[:first_link], "\t Link 0: <inactive>", *nvlink[first_link + 1 :]]
    assert status(gpu_cfg(), "gpu.nvlink")[0] == PASS
    assert status(gpu_cfg(), "gpu.nvlink", nvlink=one_down) == (FAIL, "GPU 0: links 0 inactive")


CONTAINER = {"engine": "containerd", "toolkit_on_host": True, "config_file": "/etc/containerd/config.toml",
             "containerd_dropin": "/etc/containerd/conf.d/99-nvidia.toml",
             "runtime_bin": "/usr/bin/nvidia-container-runtime", "test_image": None}  # fmt: skip


@pytest.mark.parametrize(("seen", "want"), [(7, FAIL), (8, PASS)])
def test_a_container_must_see_every_declared_gpu(seen: int, want: str) -> None:
    cli = ["__mode=cli", *[f"Device Index:   {i}" for i in range(seen)], "__rc=0"]
    binary = ["__file=/usr/bin/nvidia-container-runtime", "__stat=755|root|root|regular file|10", "__sha256=ab"]
    dropin = ['[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]',
              '  BinaryName = "/usr/bin/nvidia-container-runtime"', "__rc=0"]  # fmt: skip
    outputs = {"container": cli, "runtime_binary": binary, "containerd_dropin": dropin, "runtime_config": ["__rc=0"]}
    assert status(gpu_cfg(container=CONTAINER), "container.gpu_visible", **outputs)[0] == want


def file_lines(path: str, mode: str, owner: str, group: str) -> list[str]:
    return [f"__file={path}", f"__stat={mode}|{owner}|{group}|regular file|100", "__sha256=ab"]


@pytest.mark.parametrize(("mode", "want"), [("400", PASS), ("440", FAIL), ("600", FAIL), ("401", FAIL)])
def test_the_munge_key_must_be_exactly_0400(mode: str, want: str) -> None:
    key = file_lines("/etc/munge/munge.key", mode, "munge", "munge")
    assert run(slurm_cfg(), {"munge_key": key}, ["security.munge_key"])["security.munge_key"].status == want


@pytest.mark.parametrize(("mode", "want"), [("640", PASS), ("641", FAIL), ("642", FAIL), ("644", FAIL)])
def test_slurmdbd_conf_grants_other_users_nothing(mode: str, want: str) -> None:
    conf = file_lines("/etc/slurm/slurmdbd.conf", mode, "slurm", "slurm")
    r = run(slurm_cfg(accounting_db=True), {"slurmdbd_conf": conf}, ["security.slurmdbd_conf"])
    assert r["security.slurmdbd_conf"].status == want


@pytest.mark.parametrize(("missing", "listed"), [(5, "F0, F1, F2, F3, F4"), (6, "F0, F1, F2, F3, F4 ...")])
def test_dcgm_exporter_names_five_missing_counters(missing: int, listed: str) -> None:
    cfg = gpu_cfg()
    cfg["dcgm"].update(exporter=True, counters=[f"F{i}" for i in range(missing)])
    metrics = ['DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40', "__rc=0"]
    assert status(cfg, "monitoring.dcgm_exporter", dcgm_exporter=metrics) == (FAIL, f"dcgm-exporter lacks {listed}")


def test_a_drain_reason_of_the_longest_length_slurm_takes_is_kept_whole() -> None:
    prefix = len("gpuforge: health: a.b: ")

    def reason(length: int) -> str:
        return drain.reason_text([Result("a.b", "driver", "critical", FAIL, "x" * (length - prefix))])

    assert reason(MAX_REASON) == "gpuforge: health: a.b: " + "x" * (MAX_REASON - prefix)
    cut = reason(MAX_REASON + 1)
    assert len(cut) == MAX_REASON and cut.endswith("x...")


@pytest.mark.parametrize(("level", "seconds"), [(0, 180.0), (1, 180.0), (2, 900.0), (3, 3600.0), (4, 7200.0)])
def test_each_diagnostic_level_gets_its_time(level: int, seconds: float) -> None:
    cfg = gpu_cfg()
    cfg["dcgm"]["diag_level"] = level  # 0 (no diagnostic) would run level 1 if asked
    assert inputs.DCGM_DIAG.timeout(cfg) == seconds


@pytest.mark.parametrize(("replicas", "gpus"), [(0, 8), (1, 8), (2, 16)])
def test_time_slicing_multiplies_from_two_replicas(replicas: int, gpus: int) -> None:
    def change(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"]["time_slicing_replicas"] = replicas

    spec = variant("k8s-gpu-operator", change)
    worker = next(n for n in resolve_nodes(spec) if n.name == "kgpu01")
    assert cluster_k8s.expected_gpu_resources(spec, worker) == ({"nvidia.com/gpu": gpus}, None)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("spent", "retried"), [(29.9, True), (30.0, False)])
def test_ssh_is_retried_only_within_the_first_half_of_its_time(
    monkeypatch: pytest.MonkeyPatch, spent: float, retried: bool
) -> None:
    clock = _Clock()
    monkeypatch.setattr(runner, "time", clock)
    calls: list[float] = []

    def once(node: Any, command: str, stdin: bytes | None, timeout: float) -> runner.Completed:
        calls.append(timeout)
        clock.now += spent
        return runner.Completed(255, "", "kex_exchange_identification: Connection closed by remote host\r\n", spent)

    transport = runner.SshTransport.__new__(runner.SshTransport)
    monkeypatch.setattr(transport, "_run_once", once)
    transport.run(None, "true", timeout=60.0)  # type: ignore[arg-type]
    assert len(calls) == (2 if retried else 1)


@pytest.mark.parametrize(
    ("stderr", "passing"),
    [
        ("", True),  # LogLevel=ERROR: the node hung up after the key exchange
        ("kex_exchange_identification: Connection closed by remote host\r\n", True),
        ("kex_exchange_identification: read: Connection reset by peer\r\n", True),
        # OpenSSH 9.2p1 (Debian 12) against a listener that accepts and never answers, ConnectTimeout=2
        ("Connection timed out during banner exchange\n", True),
        ("ssh: connect to host 10.213.0.12 port 22: Connection timed out\n", False),
        ("ssh: connect to host 10.213.0.12 port 22: Connection refused\n", False),
        ("gfadmin@10.213.0.12: Permission denied (publickey).\n", False),
        ("Host key verification failed.\n", False),
    ],
)
def test_which_ssh_failures_are_tried_again(stderr: str, passing: bool) -> None:
    assert runner.ssh_failure_is_passing(stderr) is passing
