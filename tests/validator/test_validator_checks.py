"""Node-local checks against recorded node outputs (facts fixtures and synthetic captures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuforge.probes import metrics, pci
from gpuforge.render.node_program import node_program
from gpuforge.validator.node import base, execute, framework, inputs
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from gpuforge.validator.node.framework import Check, Result, evaluate

from .vhelpers import (
    driver_lines,
    gpu_cfg,
    hgx_outputs,
    munge_key_is_right_here,
    nvidia_gpus_on_this_machine,
    output,
    run,
    slurm_cfg,
    units,
)

GPU_CHECKS = [
    "hardware.nvswitch", "driver.module", "driver.nouveau", "driver.smi", "driver.version", "driver.persistence",
    "driver.fabric_manager", "gpu.ecc", "gpu.remapped_rows", "gpu.xid", "gpu.nvlink", "gpu.pcie_width",
]  # fmt: skip


def test_healthy_8x_h100_hgx_node_passes() -> None:
    r = run(gpu_cfg(), hgx_outputs())
    for cid in ["hardware.gpu_count", *GPU_CHECKS]:
        assert r[cid].status == PASS, (cid, r[cid].message)
    assert "8 NVIDIA GPU(s) on the PCI bus" in r["hardware.gpu_count"].message
    assert "4 NVSwitch" in r["hardware.nvswitch"].message
    assert r["driver.version"].message == "driver 550.127.05, as pinned"
    assert r["gpu.mig"].status == SKIP and r["gpu.dcgm_diag"].status == SKIP  # not configured
    assert r["scheduler.munge"].status == SKIP  # no Slurm in this config


def test_driver_version_mismatch_fails_with_both_versions() -> None:
    r = run(gpu_cfg(driver="535.261.03"), hgx_outputs())
    assert r["driver.version"].status == FAIL
    assert r["driver.version"].message == "driver 550.127.05 loaded, the spec pins 535.261.03"


def test_nvidia_smi_exit_9_is_explained_and_blocks_gpu_health() -> None:
    r = run(gpu_cfg(), hgx_outputs(smi=output("nvidia/smi_gpus_exit9_driver_not_loaded")))
    assert r["driver.smi"].status == FAIL
    assert r["driver.smi"].message.startswith("nvidia-smi exit code 9: NVIDIA driver is not loaded")
    for cid in ("driver.persistence", "gpu.ecc", "gpu.remapped_rows", "gpu.nvlink", "gpu.pcie_width"):
        assert r[cid].status == BLOCKED, cid
        assert r[cid].message.startswith("driver.smi fail: nvidia-smi exit code 9")
    assert r["gpu.xid"].status == PASS  # reads the kernel log, needs no nvidia-smi


def test_xid_79_fails() -> None:
    r = run(gpu_cfg(), hgx_outputs(xid=output("nvidia/xid_79_fallen_off_bus")))
    assert r["gpu.xid"].status == FAIL
    assert "Xid 79 on 0000:44:00.0 (GPU has fallen off the bus: drain)" in r["gpu.xid"].message


def test_application_xids_pass_with_a_note_and_109_needs_a_gpu_reset() -> None:
    """Xid 13 is the application's (restart it); NVIDIA's catalog asks for a GPU reset on 109."""
    r = run(gpu_cfg(), hgx_outputs(xid=output("nvidia/xid_13_harmless_and_109_dmesg_ctime")))
    assert r["gpu.xid"].status == FAIL
    assert r["gpu.xid"].message.startswith("critical Xid since boot (dmesg): Xid 109 on ")
    assert "(Context Switch Timeout Error: reset GPU)" in r["gpu.xid"].message
    only_13 = [line for line in output("nvidia/xid_13_harmless_and_109_dmesg_ctime") if ": 109, " not in line]
    r = run(gpu_cfg(), hgx_outputs(xid=only_13))
    assert (r["gpu.xid"].status, r["gpu.xid"].message) == (
        PASS,
        "no critical Xid since boot, only Xid 13 (Graphics Engine Exception; restart app)",
    )


def test_remapped_rows_pending_fails() -> None:
    r = run(gpu_cfg(), hgx_outputs(remapped=output("nvidia/remapped_rows_pending")))
    assert r["gpu.remapped_rows"].status == FAIL
    assert r["gpu.remapped_rows"].message == "0000:0e:00.0: row remapping pending (reset the GPU)"
    r = run(gpu_cfg(), hgx_outputs(remapped=output("nvidia/remapped_rows_failure_and_na")))
    assert "row remapping FAILED" in r["gpu.remapped_rows"].message


def test_nvlink_inactive_fails() -> None:
    r = run(gpu_cfg(nvswitch=False), hgx_outputs(nvlink=output("nvidia/nvlink_v100_two_inactive_links")))
    assert r["gpu.nvlink"].status == FAIL
    assert r["gpu.nvlink"].message == "GPU 3: links 3, 5 inactive"
    # on an NVSwitch board a GPU without any active link is a failure too
    r = run(gpu_cfg(), hgx_outputs(nvlink=output("nvidia/nvlink_all_links_inactive_message")))
    assert r["gpu.nvlink"].status == FAIL and "GPU 0: no active NVLink" in r["gpu.nvlink"].message


def test_no_gpu_on_bus_and_none_in_spec_skips_every_gpu_check() -> None:
    cfg = slurm_cfg()
    r = run(cfg, {"lspci": output("nvidia/pci_no_nvidia_device"), "munge": ["__rc=0"],
                  "units": units({"munge.service": "active", "slurmd.service": "active"}),
                  "munge_key": ["__missing=/etc/munge/munge.key"]})  # fmt: skip
    reason = "no NVIDIA device on the PCI bus (lspci -d 10de: lists none) and the spec declares no GPUs for this node"
    for cid in ["hardware.gpu_count", *GPU_CHECKS, "toolkit.runtime", "monitoring.dcgm_exporter"]:
        assert (r[cid].status, r[cid].message) == (SKIP, reason), cid


def test_no_gpu_on_bus_falls_back_to_sysfs_without_lspci() -> None:
    r = run(slurm_cfg(), {"lspci": output("nvidia/pci_lspci_missing"), "sysfs_pci": ["__rc=0"]}, ["hardware.gpu_count"])
    assert r["hardware.gpu_count"].status == SKIP
    assert "no NVIDIA device on the PCI bus (/sys/bus/pci/devices lists none)" in r["hardware.gpu_count"].message


def test_spec_promises_gpus_the_bus_does_not_show() -> None:
    outputs = {
        "lspci": output("nvidia/pci_no_nvidia_device"),
        "driver": ["__sysmod=", "__refcnt="],
        "modules": output("nvidia/kernel_modules_nvidia_stack"),
        "xid": ["__source=dmesg"],
        "units": units({"nvidia-fabricmanager.service": "inactive"}),
    }
    r = run(gpu_cfg(), outputs)
    gc = r["hardware.gpu_count"]
    assert gc.status == FAIL
    assert gc.message == "the spec declares 8 x H100-80GB GPUs, but no NVIDIA GPU is on the PCI bus (lspci -d 10de:)"
    assert r["driver.module"].status == FAIL
    assert r["driver.module"].message == (
        "nvidia kernel module not loaded (no /proc/driver/nvidia/version); "
        "no NVIDIA GPU on the PCI bus (lspci -d 10de: lists none)"
    )
    assert r["driver.version"].status == BLOCKED and r["driver.version"].message.startswith("driver.module fail")


def test_gpu_count_and_model_mismatch() -> None:
    r = run(gpu_cfg(count=4), hgx_outputs(), ["hardware.gpu_count"])
    assert r["hardware.gpu_count"].message == "8 NVIDIA GPU(s) on the PCI bus, the spec declares 4 x H100-80GB"
    h200 = output("nvidia/pci_hgx_h200_domainless_with_driver_suffix")
    r = run(gpu_cfg(), hgx_outputs(lspci=h200), ["hardware.gpu_count"])
    assert r["hardware.gpu_count"].status == FAIL and "10de:2335" in r["hardware.gpu_count"].message


def test_nvswitch_promised_but_absent_and_fabric_manager_down() -> None:
    pci = output("nvidia/pci_hgx_h100_8gpu_4nvswitch")
    no_switch = [line for line in pci if "NVSwitch" not in line]
    r = run(gpu_cfg(), hgx_outputs(lspci=no_switch, units=units({"nvidia-fabricmanager.service": "failed"})))
    assert r["hardware.nvswitch"].status == FAIL
    assert r["driver.fabric_manager"].status == FAIL
    assert r["driver.fabric_manager"].message == "nvidia-fabricmanager.service is failed (dead)"
    r = run(gpu_cfg(nvswitch=False), hgx_outputs(), ["driver.fabric_manager", "hardware.nvswitch"])
    assert r["driver.fabric_manager"].status == SKIP
    assert r["hardware.nvswitch"].status == FAIL  # the board has switches the spec does not declare


def test_nouveau_persistence_ecc_pcie() -> None:
    r = run(gpu_cfg(count=3, nvswitch=False, driver="535.129.03"), hgx_outputs(
        lspci=["__missing=lspci"],
        sysfs_pci=["0000:07:00.0 0x030200 0x20b2", "0000:0f:00.0 0x030200 0x20b2", "0000:06:00.0 0x030000 0x1eb1",
                   "__rc=0"],
        smi=output("nvidia/smi_gpus_mig_pending_ecc_degraded_link_na"),
        modules=output("nvidia/kernel_modules_nouveau_loaded"), driver=driver_lines("535.129.03"),
        nvlink=["__rc=0"], remapped=["__rc=0"]))  # fmt: skip
    assert r["driver.nouveau"].status == FAIL
    assert r["driver.persistence"].status == FAIL and "GPU 1, 2" in r["driver.persistence"].message
    assert r["gpu.ecc"].status == FAIL and r["gpu.ecc"].message == "uncorrected volatile ECC errors: GPU 1: 2"
    assert r["gpu.pcie_width"].status == FAIL and "GPU 1: x8 of x16" in r["gpu.pcie_width"].message
    assert r["gpu.remapped_rows"].status == SKIP
    assert r["gpu.nvlink"].status == PASS  # PCIe GPUs without NVLink bridges


def test_mig_assert() -> None:
    cfg = gpu_cfg(mig={"config": "all-1g.10gb", "file": "/etc/nvidia-mig-manager/gpuforge.yaml"})
    r = run(cfg, hgx_outputs(mig=output("mig/mig_parted_assert_not_applied")), ["gpu.mig"])
    assert r["gpu.mig"].status == FAIL
    assert r["gpu.mig"].message == (
        "MIG layout all-1g.10gb not applied: Assertion failure: selected configuration not currently applied"
    )
    r = run(cfg, hgx_outputs(mig=output("mig/mig_parted_assert_applied")), ["gpu.mig"])
    assert r["gpu.mig"].status == PASS


def test_dcgm_diag_only_when_asked_and_only_in_validate_mode() -> None:
    cfg = gpu_cfg()
    cfg["dcgm"]["diag_level"] = 3
    diag = output("dcgm/diag_json_v3_skip_and_fail")
    r = run(cfg, hgx_outputs(dcgm_diag=diag), ["gpu.dcgm_diag"])
    assert r["gpu.dcgm_diag"].status == FAIL and r["gpu.dcgm_diag"].message.startswith("dcgmi diag -r 3 failed:")
    assert "gpu.dcgm_diag" not in {c.id for c in execute.select(health_only=True)}
    assert "container.gpu_visible" not in {c.id for c in execute.select(health_only=True)}


def test_container_runtime_and_gpu_visibility() -> None:
    container = {"engine": "containerd", "toolkit_on_host": True, "config_file": "/etc/containerd/config.toml",
                 "containerd_dropin": "/etc/containerd/conf.d/99-nvidia.toml",
                 "runtime_bin": "/usr/bin/nvidia-container-runtime", "test_image": None}  # fmt: skip
    cfg = gpu_cfg(container=container)
    dropin = [
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]',
        '  runtime_type = "io.containerd.runc.v2"',
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]',
        '  BinaryName = "/usr/bin/nvidia-container-runtime"',
        "__rc=0",
    ]
    binary = ["__file=/usr/bin/nvidia-container-runtime", "__stat=755|root|root|regular file|10", "__sha256=ab"]
    cli = ["__mode=cli", *[f"Device Index:   {i}" for i in range(8)], "__rc=0"]
    ok = hgx_outputs(runtime_config=["version = 2", "__rc=0"], containerd_dropin=dropin, runtime_binary=binary,
                     container=cli)  # fmt: skip
    r = run(cfg, ok, ["toolkit.runtime", "container.gpu_visible"])
    assert r["toolkit.runtime"].status == PASS
    assert r["container.gpu_visible"].status == PASS
    assert "nvidia-container-cli info (no test image present) shows 8 GPU(s)" in r["container.gpu_visible"].message
    r = run(cfg, {**ok, "containerd_dropin": ["__missing=/etc/containerd/conf.d/99-nvidia.toml"]},
            ["toolkit.runtime", "container.gpu_visible"])  # fmt: skip
    assert r["toolkit.runtime"].status == FAIL and "nvidia-ctk runtime configure" in r["toolkit.runtime"].message
    assert r["container.gpu_visible"].status == BLOCKED


def test_munge_key_0644_fails_and_digest_is_kept() -> None:
    key = ["__file=/etc/munge/munge.key", "__stat=644|munge|munge|regular file|1024", "__sha256=AB12"]
    ctx = framework.NodeContext(slurm_cfg(), {"munge_key": key})
    results, ctx = execute.run_node_checks(slurm_cfg(), ["security.munge_key"], ctx=ctx)
    assert (results[0].status, results[0].message) == (
        FAIL, "/etc/munge/munge.key is 0644 munge:munge, want 0400 munge:munge")  # fmt: skip
    assert ctx.data["security.munge_key"] == {"sha256": "ab12"}
    good = output("files/file_digests_munge_key_setuid_unreadable_empty")[:3]
    r = run(slurm_cfg(), {"munge_key": good}, ["security.munge_key"])
    assert r["security.munge_key"].status == PASS


def test_slurmdbd_conf_world_readable_fails() -> None:
    cfg = slurm_cfg(accounting_db=True)
    conf = ["__file=/etc/slurm/slurmdbd.conf", "__stat=644|slurm|slurm|regular file|700", "__sha256=aa"]
    r = run(cfg, {"slurmdbd_conf": conf}, ["security.slurmdbd_conf"])
    assert r["security.slurmdbd_conf"].status == FAIL and "open to every user" in r["security.slurmdbd_conf"].message
    conf[1] = "__stat=600|slurm|slurm|regular file|700"
    assert run(cfg, {"slurmdbd_conf": conf}, ["security.slurmdbd_conf"])["security.slurmdbd_conf"].status == PASS


def test_munge_stopped_fails_and_blocks_slurmd() -> None:
    out = {"units": units({"munge.service": "inactive", "slurmd.service": "active"}), "munge": ["__rc=0"]}
    r = run(slurm_cfg(), out, ["scheduler.slurmd"])
    assert (r["scheduler.munge"].status, r["scheduler.munge"].message) == (FAIL, "munge.service is inactive (dead)")
    assert r["scheduler.slurmd"].status == BLOCKED


def test_pyxis_missing_from_srun_help() -> None:
    cfg = slurm_cfg(pyxis=True)
    r = run(cfg, {"srun_help": ["Usage: srun [OPTIONS(0)...]", "  -N, --nodes=N", "__rc=0"]}, ["job.pyxis"])
    assert r["job.pyxis"].status == FAIL and "pyxis not loaded" in r["job.pyxis"].message
    help_ok = ["Options provided by plugins:", "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH", "__rc=0"]
    assert run(cfg, {"srun_help": help_ok}, ["job.pyxis"])["job.pyxis"].status == PASS
    assert run(slurm_cfg(), {}, ["job.pyxis"])["job.pyxis"].status == SKIP


def test_node_exporter_check() -> None:
    cfg = slurm_cfg()
    cfg["node_exporter"] = {"enabled": True, "port": 9100}
    ok = ["# HELP node_load1 1m load average.", "node_load1 0.1", "go_goroutines 8", "__rc=0"]
    assert run(cfg, {"node_exporter": ok}, ["monitoring.node_exporter"])["monitoring.node_exporter"].status == PASS
    r = run(cfg, {"node_exporter": ["__error=[Errno 111] Connection refused", "__rc=1"]}, ["monitoring.node_exporter"])
    assert (
        r["monitoring.node_exporter"].message
        == "node-exporter on :9100 does not answer: [Errno 111] Connection refused"
    )
    broken = ["node_textfile_scrape_error 1", "node_time_seconds 1.7e+09", "__rc=0"]
    r = run(cfg, {"node_exporter": broken}, ["monitoring.node_exporter"])
    assert r["monitoring.node_exporter"].status == FAIL
    assert "could not read a file of its textfile directory" in r["monitoring.node_exporter"].message
    fine = ["node_textfile_scrape_error 0", "node_time_seconds 1.7e+09", "__rc=0"]
    assert run(cfg, {"node_exporter": fine}, ["monitoring.node_exporter"])["monitoring.node_exporter"].status == PASS


class _Exporter:
    """An HTTP server on 127.0.0.1 (a random port) that answers like an exporter and records
    each request line; ``status`` and ``body`` say what it answers."""

    def __init__(self, status: int = 200, body: bytes = b"node_time_seconds 1.7e+09\n") -> None:
        import http.server
        import threading

        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.requestline)
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_node_exporter_probe_asks_two_collectors_only() -> None:
    """The check's probe filters node-exporter's collectors (``collect[]``): textfile and time."""
    exporter = _Exporter()
    try:
        lines = inputs.NODE_EXPORTER.read({"node_exporter": {"enabled": True, "port": exporter.port}})
    finally:
        exporter.close()
    assert lines == ["node_time_seconds 1.7e+09", "__rc=0"]
    assert exporter.requests == ["GET /metrics?collect%5B%5D=textfile&collect%5B%5D=time HTTP/1.0"]


def test_local_http_lines_reads_the_body_and_names_what_went_wrong() -> None:
    big = b"".join(b"metric_%d 1\n" % i for i in range(100_000))
    for status, body, want in (
        (200, big, [*big.decode().splitlines(), "__rc=0"]),
        (404, b"no such page", ["__error=HTTP 404 Not Found"]),
        (400, b"unknown collector", ["__error=HTTP 400 Bad Request"]),
    ):
        exporter = _Exporter(status, body)
        try:
            assert metrics.local_http_lines(exporter.port, "/metrics") == want
        finally:
            exporter.close()
    exporter = _Exporter(200, big)
    try:  # a body past the limit is cut there, never read whole
        cut = metrics.local_http_lines(exporter.port, "/metrics", limit=1000)
    finally:
        exporter.close()
    assert cut[-1] == "__rc=0" and sum(len(ln) + 1 for ln in cut[:-1]) <= 1000 + 1 and cut[0] == "metric_0 1"
    closed = _Exporter()
    port = closed.port
    closed.close()
    (refused,) = metrics.local_http_lines(port, "/metrics")
    assert refused.startswith("__error=") and "refused" in refused
    assert metrics.parse_exporter_metrics([refused])["error"] == refused.removeprefix("__error=")


def test_dcgm_exporter_check() -> None:
    cfg = gpu_cfg()
    cfg["dcgm"].update(exporter=True, counters=["DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_DEV_GPU_TEMP"])
    r = run(cfg, hgx_outputs(dcgm_exporter=output("metrics/exporter_nvlink_a100")), ["monitoring.dcgm_exporter"])
    assert r["monitoring.dcgm_exporter"].status == FAIL
    assert r["monitoring.dcgm_exporter"].message == "dcgm-exporter lacks DCGM_FI_DEV_GPU_TEMP"


# engine ---------------------------------------------------------------------------------------


def _check(cid: str, deps: tuple[str, ...] = ()) -> Check:
    return Check(cid, "driver", "critical", "t", lambda ctx: (PASS, "ok"), deps)


def test_dependency_that_failed_or_was_skipped_blocks() -> None:
    for status in (FAIL, SKIP, BLOCKED):
        prior = {"a.x": Result("a.x", "driver", "critical", status, "why")}
        called = []

        def call(called: list[int] = called) -> tuple[str, str]:
            called.append(1)
            return PASS, "ran"

        r = evaluate(_check("b.y", ("a.x",)), None, prior, call)
        assert (r.status, r.message) == (BLOCKED, f"a.x {status}: why")
        assert not called, "a blocked check must not run"


def test_gate_skips_before_anything_runs_and_crash_is_a_failure() -> None:
    r = evaluate(_check("b.y"), "not here", {}, lambda: (PASS, "ran"))
    assert (r.status, r.message) == (SKIP, "not here")

    def boom() -> tuple[str, str]:
        raise RuntimeError("bad parse")

    r = evaluate(_check("b.y"), None, {}, boom)
    assert r.status == FAIL and r.message == "check crashed: RuntimeError: bad parse"
    r = evaluate(_check("b.y"), None, {}, lambda: ("ok", "weird"))
    assert r.status == FAIL


def test_missing_dependency_blocks_and_selection_pulls_dependencies() -> None:
    r = evaluate(_check("b.y", ("a.x",)), None, {}, lambda: (PASS, "ran"))
    assert r.status == BLOCKED
    ids = [c.id for c in execute.select(["gpu.ecc"])]
    assert ids == ["driver.module", "driver.smi", "gpu.ecc"]


def test_dependency_cycle_is_reported() -> None:
    with pytest.raises(ValueError, match="cycle"):
        framework.order_checks([_check("a.x", ("b.y",)), _check("b.y", ("a.x",))])


def test_health_mode_is_fast_on_this_machine(tmp_path: Path) -> None:
    """Real probes on the test machine (no GPU, no Slurm): runs, reports, never passes what did not run."""
    results, _ = execute.run_node_checks(slurm_cfg(pyxis=True), health_only=True)
    by = {r.id: r for r in results}
    # A GPU-less node spec: SKIP where the bus has no NVIDIA GPU either, FAIL where it has one.
    assert by["hardware.gpu_count"].status == (SKIP if nvidia_gpus_on_this_machine() == 0 else FAIL)
    assert all(r.status in base.STATUSES for r in results)
    assert by["security.munge_key"].status == (PASS if munge_key_is_right_here() else FAIL)


# stdlib only -----------------------------------------------------------------------------------

NODE_PROGRAM = node_program()  # nodelocal with the probes it uses, as nodes get it


def test_nodelocal_runs_as_a_standalone_script(tmp_path: Path) -> None:
    import json
    import subprocess

    cfg = tmp_path / "health.json"
    cfg.write_text(json.dumps(slurm_cfg()))
    script = tmp_path / "gpuforge-health"
    script.write_bytes(NODE_PROGRAM)
    cp = subprocess.run([sys.executable, "-I", str(script), "--config", str(cfg), "--json", "--no-slurm"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=60)  # fmt: skip
    doc = json.loads(cp.stdout)
    assert cp.returncode == (1 if not doc["ok"] else 0)
    assert doc["node"] == "node2" and doc["results"]
    cp = subprocess.run([sys.executable, "-I", str(script), "--config", str(tmp_path / "none.json")],
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert cp.returncode == 2 and "cannot read config" in cp.stderr
    assert NODE_PROGRAM.startswith(b"#!/usr/bin/env python3\n")


def test_probe_units_follow_roles() -> None:
    assert inputs.units_for(slurm_cfg()) == ["munge.service", "slurmd.service"]
    assert "nvidia-fabricmanager.service" in inputs.units_for(gpu_cfg())
    assert "slurmdbd.service" in inputs.units_for(slurm_cfg(accounting_db=True))


def test_unreadable_pci_bus_is_said_so() -> None:
    outputs = {"lspci": ["__missing=lspci"], "sysfs_pci": ["__error=Permission denied", "__rc=1"]}
    r = run(slurm_cfg(), outputs, ["hardware.gpu_count"])
    assert r["hardware.gpu_count"].status == SKIP and "PCI bus not readable" in r["hardware.gpu_count"].message
    r = run(gpu_cfg(), outputs, ["hardware.gpu_count"])
    assert r["hardware.gpu_count"].status == FAIL and r["hardware.gpu_count"].message.startswith(
        "cannot read the PCI bus"
    )


def test_sysfs_reader_in_process_and_in_the_shell_agree(tmp_path: Path) -> None:
    """The node program reads sysfs in-process; the reading's shell command prints the same lines."""
    for addr, vendor, klass, device in [("0000:1b:00.0", "0x10de", "0x030200", "0x2330"),
                                        ("0000:07:00.0", "0x10de", "0x068000", "0x22a3"),
                                        ("0000:00:02.0", "0x8086", "0x030000", "0x3e92")]:  # fmt: skip
        d = tmp_path / addr
        d.mkdir()
        for name, value in (("vendor", vendor), ("class", klass), ("device", device)):
            (d / name).write_text(value + "\n")
    for root in (tmp_path, tmp_path / "none"):
        local = inputs.SYSFS_PCI.read({"_sysfs_pci": str(root)})
        assert local == inputs.run_shell(pci.sysfs_pci_command(str(root)), 10)
    info = pci.parse_sysfs_pci(inputs.SYSFS_PCI.read({"_sysfs_pci": str(tmp_path)}))
    assert info["readable"] and [g["address"] for g in info["gpus"]] == ["0000:1b:00.0"]
    assert [s["address"] for s in info["nvswitches"]] == ["0000:07:00.0"]
    assert not pci.parse_sysfs_pci(inputs.SYSFS_PCI.read({"_sysfs_pci": str(tmp_path / "none")}))["readable"]


def _python39() -> str | None:
    """A Python 3.9 interpreter (RHEL 9's python3), if this machine has one."""
    import glob
    import os
    import shutil
    import subprocess

    root = os.path.expanduser(os.environ.get("PYENV_ROOT", "~/.pyenv"))
    for cand in [
        shutil.which("python3.9"),
        *sorted(glob.glob(os.path.join(root, "versions", "3.9*", "bin", "python3.9"))),
    ]:
        if not cand:
            continue
        cp = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if cp.returncode == 0 and cp.stdout.strip() == "(3, 9)":
            return cand
    return None


def test_nodelocal_runs_on_python_3_9(tmp_path: Path) -> None:
    """RHEL 9 nodes have python 3.9: the health program must not need newer syntax or library calls."""
    import json
    import subprocess

    py = _python39()
    if py is None:
        pytest.skip("no python3.9 on this machine")
    cfg = tmp_path / "health.json"
    cfg.write_text(json.dumps(gpu_cfg()))
    program = tmp_path / "gpuforge-health"
    program.write_bytes(NODE_PROGRAM)
    cp = subprocess.run([py, "-I", str(program), "--config", str(cfg), "--json", "--no-slurm", "--validate"],
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert cp.returncode in (0, 1), cp.stderr
    doc = json.loads(cp.stdout)
    assert {r["id"] for r in doc["results"]} == {c.id for c in framework.NODE_CHECKS if c.validate}


# -- paths that must not pass quietly (issue 17)


def test_unreadable_kernel_log_fails_xid_instead_of_skipping() -> None:
    r = run(gpu_cfg(), hgx_outputs(xid=["__source=none"]), ["gpu.xid"])
    assert (r["gpu.xid"].status, r["gpu.xid"].message) == (
        FAIL,
        "cannot read the kernel log (dmesg and journalctl -k failed): critical Xids cannot be ruled out",
    )


def _smi_ecc_na() -> list[str]:
    return [
        line.replace(", 81559, 0, 16, 16,", ", 81559, [N/A], 16, 16,") for line in output("nvidia/smi_gpus_8x_h100_hgx")
    ]


def test_ecc_off_on_a_data_center_gpu_fails_and_on_others_skips() -> None:
    r = run(gpu_cfg(ecc_expected=True), hgx_outputs(smi=_smi_ecc_na()), ["gpu.ecc"])
    assert r["gpu.ecc"].status == FAIL
    assert r["gpu.ecc"].message.startswith("ECC is off or unreadable on all 8 GPU(s), but the spec's H100-80GB")
    r = run(gpu_cfg(ecc_expected=False), hgx_outputs(smi=_smi_ecc_na()), ["gpu.ecc"])
    assert (r["gpu.ecc"].status, r["gpu.ecc"].message) == (
        SKIP,
        "no GPU reports ECC counters (ECC off or not supported)",
    )


def test_health_config_expects_ecc_on_mig_capable_models_only() -> None:
    from gpuforge.render import node_health_config
    from gpuforge.spec import load_spec, resolve_nodes
    from tests.conftest import REPO

    spec = load_spec(REPO / "inventories" / "slurm-h100.yaml")
    gpu_nodes = [n for n in resolve_nodes(spec) if n.hardware.gpu_count]
    assert gpu_nodes and all(node_health_config(spec, n)["gpu"]["ecc_expected"] is True for n in gpu_nodes)


def test_gpus_on_the_bus_that_the_spec_does_not_declare_fail() -> None:
    r = run(gpu_cfg(count=0), hgx_outputs(), ["hardware.gpu_count"])
    assert (r["hardware.gpu_count"].status, r["hardware.gpu_count"].message) == (
        FAIL,
        "8 NVIDIA GPU(s) on the PCI bus, but the spec declares none for this node",
    )


def test_nvidia_smi_listing_fewer_gpus_than_the_spec_fails() -> None:
    smi = output("nvidia/smi_gpus_8x_h100_hgx")
    six = [line for line in smi if not line.startswith(("6, ", "7, "))]
    r = run(gpu_cfg(), hgx_outputs(smi=six), ["driver.smi"])
    assert (r["driver.smi"].status, r["driver.smi"].message) == (
        FAIL,
        "nvidia-smi lists 6 of the 8 GPUs the spec declares",
    )


def test_unreadable_proc_modules_fails_nouveau() -> None:
    r = run(gpu_cfg(), hgx_outputs(modules=["__rc=1"]), ["driver.nouveau"])
    assert (r["driver.nouveau"].status, r["driver.nouveau"].message) == (FAIL, "cannot read /proc/modules")


def test_dcgmi_missing_timed_out_or_erroring_fails() -> None:
    cfg = gpu_cfg()
    cfg["dcgm"]["diag_level"] = 2
    cases = {
        "dcgmi not found (DCGM not installed)": ["__missing=dcgmi"],
        "dcgmi diag -r 2: did not finish within 900 s": ["__timeout=900"],
        "dcgmi diag -r 2: Error: unable to establish a connection to the host engine": [
            "Error: unable to establish a connection to the host engine",
            "__rc=226",
        ],
        "dcgmi diag -r 2: dcgmi exited with status 226": ["__rc=226"],
    }
    for message, out in cases.items():
        r = run(cfg, hgx_outputs(dcgm_diag=out), ["gpu.dcgm_diag"])
        assert (r["gpu.dcgm_diag"].status, r["gpu.dcgm_diag"].message) == (FAIL, message), out


def test_mig_parted_missing_or_timed_out_fails() -> None:
    cfg = gpu_cfg(mig={"config": "all-1g.10gb", "file": "/etc/nvidia-mig-manager/gpuforge.yaml"})
    r = run(cfg, hgx_outputs(mig=["__missing=nvidia-mig-parted"]), ["gpu.mig"])
    assert (r["gpu.mig"].status, r["gpu.mig"].message) == (FAIL, "nvidia-mig-parted not found")
    r = run(cfg, hgx_outputs(mig=["__timeout=30"]), ["gpu.mig"])
    assert (r["gpu.mig"].status, r["gpu.mig"].message) == (FAIL, "nvidia-mig-parted assert did not finish within 30 s")


def test_swap_on_a_kubernetes_node_fails() -> None:
    cfg = {**slurm_cfg(), "slurm": None, "kubernetes": {"control_plane": False}}
    on = ["Filename\tType\tSize\tUsed\tPriority", "/swap.img file 2097148 0 -2", "__rc=0"]
    r = run(cfg, {"swaps": on}, ["scheduler.k8s_swap_off"])
    assert r["scheduler.k8s_swap_off"].status == FAIL
    assert r["scheduler.k8s_swap_off"].message.startswith("swap is on: /swap.img")
    r = run(cfg, {"swaps": ["Filename\tType\tSize\tUsed\tPriority", "__rc=0"]}, ["scheduler.k8s_swap_off"])
    assert (r["scheduler.k8s_swap_off"].status, r["scheduler.k8s_swap_off"].message) == (PASS, "swap off")
    assert run(slurm_cfg(), {"swaps": on}, ["scheduler.k8s_swap_off"])["scheduler.k8s_swap_off"].status == SKIP


def test_a_probe_that_raises_while_read_ahead_is_left_for_its_check() -> None:
    """The node program reads its inputs ahead in threads; one that raises there is left out (no thread
    dies with a traceback on stderr), and the others are all read."""
    from gpuforge.validator.node.framework import _in_threads

    def run(key: str) -> list[str]:
        if key == "bad":
            raise OSError("exec failed")
        return [key]

    keys = ["a", "bad", "b", "c", "d"]
    assert _in_threads(run, keys, 2) == {k: [k] for k in keys if k != "bad"}
