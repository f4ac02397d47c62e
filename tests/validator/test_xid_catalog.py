"""One Xid table (gpuforge.spec.xid_catalog): the node check, the node program and the alert rules agree on it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.render.alert_rules import alert_rules
from gpuforge.render.node_program import embedded_sources
from gpuforge.spec import xid_catalog
from gpuforge.spec.xid_catalog import ACTIONS, BUCKET_ACTION, BY_CODE, CRITICAL_XIDS, RMA, XIDS
from gpuforge.validator.node.base import FAIL, PASS
from gpuforge.validator.node.checks_gpu import MAX_XIDS_LISTED
from tests.helpers import inventory, variant

from .vhelpers import gpu_cfg, hgx_outputs, run

#: Rows whose action is not their catalog bucket's, and why (see the table's docstring).
ACTION_EXCEPTIONS = {64: RMA}  # a row-remapping failure: NVIDIA's RMA policy, not a reset


def xid_lines(*codes: int, bus: str = "0000:1b:00") -> list[str]:
    """``dmesg`` lines of these Xids, in the kernel's format (tests/facts/fixtures/nvidia/xid_*)."""
    return ["__source=dmesg"] + [f"[  42.0] NVRM: Xid (PCI:{bus}): {c}, pid=7, name=python3, test" for c in codes]


def gpu_xid(*codes: int) -> tuple[str, str]:
    r = run(gpu_cfg(), hgx_outputs(xid=xid_lines(*codes)), ["gpu.xid"])["gpu.xid"]
    return r.status, r.message


def xid_alerts(spec: Any) -> dict[int, dict[str, Any]]:
    groups = {g["name"]: g["rules"] for g in alert_rules(spec)["groups"]}
    return {int(r["labels"]["xid"]): r for r in groups["gpuforge-gpu"] if r["alert"] == "GpuXidError"}


def test_the_table_is_well_formed() -> None:
    codes = [x.code for x in XIDS]
    assert codes == sorted(set(codes)) and len(codes) == len(BY_CODE)
    for row in XIDS:
        assert row.action in ACTIONS and row.meaning and row.mnemonic.isupper(), row
        assert row.action == ACTION_EXCEPTIONS.get(row.code, BUCKET_ACTION[row.bucket]), row
        assert row.critical == (row.action not in ("none", "restart app")), row
    assert set(ACTION_EXCEPTIONS) <= set(BY_CODE)


@pytest.mark.parametrize("row", XIDS, ids=lambda x: str(x.code))
def test_the_health_check_fails_exactly_on_the_critical_xids(row: xid_catalog.Xid) -> None:
    status, message = gpu_xid(row.code)
    if row.critical:
        assert status == FAIL and f"Xid {row.code} on 0000:1b:00.0 ({row.meaning}: {row.action})" in message
    else:
        assert (status, message) == (PASS, f"no critical Xid since boot, only {xid_catalog.describe(row.code)}")


def test_the_alert_rules_fire_exactly_on_the_critical_xids_with_the_tables_runbook() -> None:
    alerts = xid_alerts(inventory("slurm-h100"))
    assert list(alerts) == list(CRITICAL_XIDS) == [x.code for x in XIDS if x.critical]
    for code, rule in alerts.items():
        assert rule["expr"] == f"DCGM_FI_DEV_XID_ERRORS == {code}"
        assert rule["annotations"]["runbook"] == BY_CODE[code].runbook()


def test_the_spec_adds_alerts_but_the_health_check_keeps_the_table() -> None:
    def change(d: dict[str, Any]) -> None:
        d["monitoring"]["alerts"] = {"xids": [13, 95, 999]}

    alerts = xid_alerts(variant("slurm-h100", change))
    assert list(alerts) == [*CRITICAL_XIDS, 13, 999]
    assert alerts[13]["annotations"]["runbook"] == BY_CODE[13].runbook()
    assert (
        "999 (listed in monitoring.alerts.xids): see https://docs.nvidia.com/deploy/xid-errors/"
        in (alerts[999]["annotations"]["runbook"])
    )
    assert gpu_xid(13)[0] == PASS


def test_xid_95_is_critical_for_the_check_and_the_alerts_alike() -> None:
    """The drift this table ends: validate and the health check passed Xid 95, the alerts fired on it."""
    assert BY_CODE[95].action == "reset GPU"
    assert gpu_xid(95)[0] == FAIL
    assert 95 in xid_alerts(inventory("slurm-h100"))


def test_the_node_program_carries_this_very_table() -> None:
    from pathlib import Path

    assert embedded_sources()["gpuforge.spec.xid_catalog"] == Path(xid_catalog.__file__).read_text()


def test_an_xid_missing_from_the_table_passes_and_points_to_nvidias_catalog() -> None:
    assert 999 not in BY_CODE
    status, message = gpu_xid(999)
    assert status == PASS and message.endswith(f"Xid 999 (not in gpuforge's table: see {xid_catalog.CATALOG_URL})")


def test_a_failure_names_four_critical_xids_and_counts_the_rest() -> None:
    four = CRITICAL_XIDS[:MAX_XIDS_LISTED]
    status, message = gpu_xid(*four)
    assert status == FAIL and all(f"Xid {c} on" in message for c in four) and "more" not in message
    status, message = gpu_xid(*CRITICAL_XIDS[: MAX_XIDS_LISTED + 1])
    assert status == FAIL and message.endswith(" and 1 more")
    assert f"Xid {CRITICAL_XIDS[MAX_XIDS_LISTED]} on" not in message
    # the same Xid on the same GPU twice is one item; on two GPUs, two
    assert gpu_xid(95, 95)[1].count("Xid 95 on") == 1
    lines = [*xid_lines(95), *xid_lines(95, bus="0000:43:00")[1:]]
    r = run(gpu_cfg(), hgx_outputs(xid=lines), ["gpu.xid"])["gpu.xid"]
    assert r.message.count("Xid 95 on") == 2
