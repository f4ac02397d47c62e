"""The judges on recorded real outputs (tests/acceptance/fixtures, each naming its source)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuforge.acceptance import parsers
from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP
from tests.acceptance.conftest import FIXTURES, fixture, record_of
from tests.facts.test_facts import FIXTURE_DIR


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_names_its_source_and_command(path: Any) -> None:
    doc = json.loads(path.read_text())
    assert doc["source"] and doc["command"] and "rc" in doc


def test_stress_ng_cpu_metrics_row_recorded() -> None:
    parsed = parsers.parse_stress_ng(fixture("stress_cpu2_pass.json")["stderr"])
    assert parsed["completed"] and not parsed["fail_lines"]
    assert parsed["stressors"]["cpu"] == {
        "bogo_ops": 10939.0, "real_time_s": 5.0, "usr_s": 4.8, "sys_s": 0.0, "bogo_ops_per_s": 2186.57,
        "bogo_ops_per_s_cpu": 2277.32,
    }  # fmt: skip


def test_stress_ng_older_info_prefix_is_read_too() -> None:
    """Releases before 0.15 print the rows with 'info:' (RHEL for Real Time 8 guide's example)."""
    text = "stress-ng: info:  [17579] matrix  349322   60.00    203.23   0.19      5822.03      1717.25"
    assert parsers.parse_stress_ng(text)["stressors"]["matrix"]["bogo_ops_per_s"] == 5822.03


def test_judge_stress_pass_and_threshold() -> None:
    ok = parsers.judge_stress("memory", record_of("stress_vm_pass.json"), "vm", None)
    assert (ok.status, ok.metrics) == (PASS, {"bogo_ops_per_s": 21017.53})
    low = parsers.judge_stress("memory", record_of("stress_vm_pass.json"), "vm", 30000)
    assert low.status == FAIL and "below the minimum 30000" in low.message


def test_judge_stress_exit_status_names_the_cause() -> None:
    bad = parsers.judge_stress("cpu", record_of("stress_bad_option.json"), "cpu", None)
    assert bad.status == FAIL and "an error (bad options" in bad.message
    rec = {**record_of("stress_cpu2_pass.json"), "rc": 2, "stderr": "stress-ng: fail:  [1] vm: detected memory error"}
    two = parsers.judge_stress("memory", rec, "vm", None)
    assert two.status == FAIL and "one or more stressors failed: stress-ng: fail:" in two.message


def test_the_throttled_run_is_a_quarter_of_the_others() -> None:
    """The recorded run in a 20% CPU quota: the figure the lab's slowed node should show."""
    rates = [parsers.judge_stress("cpu", record_of(f"stress_cpu1_{n}.json"), "cpu", None).metrics["bogo_ops_per_s"]
             for n in ("a", "b", "slow")]  # fmt: skip
    assert rates[2] < 0.25 * min(rates[:2])


def test_fio_json_recorded() -> None:
    parsed = parsers.parse_fio(fixture("fio_randrw_pass.json")["stdout"])
    assert parsed["version"] == "fio-3.33" and parsed["job_error"] == 0
    assert parsed["read"]["iops"] == pytest.approx(46630.021987)
    assert parsed["read"]["mib_s"] == pytest.approx(190996570 / 2**20)
    result = parsers.judge_fio(record_of("fio_randrw_pass.json"), None, None)
    assert result.status == PASS and set(result.metrics) == {"read_iops", "read_mib_s", "write_iops", "write_mib_s"}
    assert parsers.judge_fio(record_of("fio_randrw_pass.json"), 10**6, None).status == FAIL


def test_fio_error_has_no_json_and_fails_with_its_message() -> None:
    result = parsers.judge_fio(record_of("fio_bad_directory.json"), None, None)
    assert result.status == FAIL and "/nonexistent/dir is not a directory" in result.message


def test_nccl_two_nodes_recorded() -> None:
    parsed = parsers.parse_nccl(fixture("nccl_2node_16gpu.json")["stdout"])
    assert len(parsed["rows"]) == 31 and parsed["avg_busbw"] == 70.742 and parsed["out_of_bounds"] == 0
    assert parsed["largest"] == {"size": 8589934592, "algbw": 180.71, "busbw": 338.82, "busbw_in_place": 337.35,
                                 "wrong": 0}  # fmt: skip
    result = parsers.judge_nccl("nccl_leaf", record_of("nccl_2node_16gpu.json"), 300)
    assert result.status == PASS and result.metrics == {"busbw_gbps": 338.82, "avg_busbw_gbps": 70.742}
    assert parsers.judge_nccl("nccl_leaf", record_of("nccl_2node_16gpu.json"), 400).status == FAIL


def test_nccl_2_18_header_and_no_average_line() -> None:
    parsed = parsers.parse_nccl(fixture("nccl_8gpu_2_18.json")["stdout"])
    assert len(parsed["rows"]) == 25 and parsed["avg_busbw"] is None
    result = parsers.judge_nccl("nccl_node", record_of("nccl_8gpu_2_18.json"), None)
    assert result.status == PASS and result.metrics == {"busbw_gbps": 43.86}


def test_nccl_wrong_values_fail() -> None:
    rec = record_of("nccl_2node_16gpu.json")
    rec["stdout"] = rec["stdout"].replace("338.82      0", "338.82      3")
    assert parsers.judge_nccl("nccl_node", rec, None).status == FAIL


def test_dcgm_diag_json_dcgm4_fixtures() -> None:
    """tests/facts' DCGM 4 JSON (shaped as DCGM 4.6.0 writes it, checked against DCGM's own schema)."""
    for name, status in (("diag_json_dcgm4_memory_fail_per_entity.json", FAIL),
                         ("diag_json_dcgm4_summary_fail_without_entity.json", FAIL)):  # fmt: skip
        doc = json.loads((FIXTURE_DIR / "dcgm" / name).read_text())
        lines = [x for x in doc["output"] if not x.startswith("__")]
        rec = {"name": "dcgm", "status": "ran", "rc": 0, "stdout": "\n".join(lines), "stderr": "", "duration_s": 1}
        result = parsers.judge_dcgm(rec)
        assert result.status == status, result
    assert "memory: fail (GPU 1 had uncorrectable memory errors" in parsers.judge_dcgm(
        {"name": "dcgm", "status": "ran", "rc": 0, "duration_s": 1, "stdout": "\n".join(
            x for x in json.loads((FIXTURE_DIR / "dcgm" / "diag_json_dcgm4_memory_fail_per_entity.json").read_text())[
                "output"] if not x.startswith("__"))}).message  # fmt: skip


def test_health_program_failures_are_named() -> None:
    result = parsers.judge_health(record_of("health_fail.json"))
    assert result.status == FAIL
    assert result.message.startswith(
        "config.files_intact, config.units_loaded, scheduler.munge, monitoring.node_exporter, security.munge_key failed"
    )


def test_steps_that_did_not_run_never_pass() -> None:
    assert parsers.judge_health({"status": "missing", "reason": "x is not installed"}).status == ERROR
    assert parsers.judge_dcgm({"status": "skipped", "reason": "no GPUs"}).status == SKIP
    timed = {**record_of("stress_cpu2_pass.json"), "timed_out": True, "rc": None}
    assert parsers.judge_stress("cpu", timed, "cpu", None).status == FAIL
    garbage = {"name": "cpu", "status": "ran", "rc": 0, "stdout": "", "stderr": "hello", "duration_s": 1}
    assert parsers.judge_stress("cpu", garbage, "cpu", None).status == ERROR
    assert parsers.judge_health({**garbage, "stdout": "{not json"}).status == ERROR
