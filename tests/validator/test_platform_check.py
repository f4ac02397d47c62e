"""hardware.platform: the node's /etc/os-release and uname -m against its platform row, from the rendered config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.render import node_health_config
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.validator.node import execute, framework
from gpuforge.validator.node.base import FAIL, PASS, SKIP

RECORDED = Path(__file__).parents[1] / "facts" / "fixtures" / "platform" / "os_release_debian12_x86_64.json"

SPEC = """
cluster: {name: t, scheduler: slurm, os: debian12}
node_groups:
  - {name: ctl, hosts: ctl1, roles: [controller]}
  - {name: arm, hosts: arm1, roles: [compute], os: rocky9, arch: aarch64,
     hardware: {sockets: 1, cores_per_socket: 72, threads_per_core: 1, real_memory_mb: 480000}}
slurm:
  accounting: {enabled: false}
  partitions: [{name: batch, nodes: arm}]
"""


def config(node: str) -> dict[str, object]:
    spec = parse_spec(SPEC)
    return node_health_config(spec, next(n for n in resolve_nodes(spec) if n.name == node))


def platform_result(cfg: dict[str, object], lines: list[str]) -> tuple[str, str]:
    ctx = framework.NodeContext(cfg, {"os_release": lines})
    results, _ = execute.run_node_checks(cfg, ["hardware.platform"], ctx=ctx)
    return results[0].status, results[0].message


def os_release(os_id: str, version: str, machine: str) -> list[str]:
    return [f'ID="{os_id}"', f'VERSION_ID="{version}"', "__section=machine", machine]


def test_the_config_names_the_platform_row() -> None:
    assert config("arm1")["platform"] == {
        "title": "Rocky Linux 9", "os_id": "rocky", "version_id": "9", "arch": "aarch64"}  # fmt: skip


def test_the_recorded_debian12_machine_passes_as_debian12_x86_64() -> None:
    lines = json.loads(RECORDED.read_text())["output"]
    assert platform_result(config("ctl1"), lines) == (
        PASS, "Debian 12 (bookworm) (debian 12) on x86_64, as the spec says")  # fmt: skip


@pytest.mark.parametrize(
    ("lines", "status", "message"),
    [
        (os_release("rocky", "9.4", "aarch64"), PASS, "Rocky Linux 9 (rocky 9.4) on aarch64, as the spec says"),
        (os_release("rocky", "9", "aarch64"), PASS, "Rocky Linux 9 (rocky 9) on aarch64, as the spec says"),
        (os_release("rocky", "8.10", "aarch64"), FAIL,
         "/etc/os-release says rocky 8.10; the spec says Rocky Linux 9 on aarch64"),
        (os_release("rocky", "90", "aarch64"), FAIL,
         "/etc/os-release says rocky 90; the spec says Rocky Linux 9 on aarch64"),
        (os_release("almalinux", "9.4", "aarch64"), FAIL,
         "/etc/os-release says almalinux 9.4; the spec says Rocky Linux 9 on aarch64"),
        (os_release("rocky", "9.4", "x86_64"), FAIL,
         "uname -m says x86_64; the spec says Rocky Linux 9 on aarch64 (packages would be for another CPU)"),
        (["__section=machine", "aarch64"], FAIL, "cannot read /etc/os-release; the spec says Rocky Linux 9 on aarch64"),
    ],
)  # fmt: skip
def test_each_difference_is_named(lines: list[str], status: str, message: str) -> None:
    assert platform_result(config("arm1"), lines) == (status, message)


def test_a_config_without_a_platform_is_skipped_not_passed() -> None:
    cfg = config("arm1")
    del cfg["platform"]
    assert platform_result(cfg, os_release("rocky", "9.4", "aarch64"))[0] == SKIP


def test_a_unit_changed_without_daemon_reload_is_a_pending_restart() -> None:
    from tests.validator.vhelpers import units

    cfg = config("arm1")
    lines = units({"munge.service": "active", "slurmd.service": "active"})
    ctx = framework.NodeContext(cfg, {"units": lines})
    results, _ = execute.run_node_checks(cfg, ["config.units_loaded"], ctx=ctx)
    assert (results[0].status, results[0].message) == (PASS, "2 managed unit(s) loaded as they are on disk")
    stale = [*lines[:-1]]
    stale.insert(stale.index("Id=slurmd.service"), "NeedDaemonReload=yes")
    ctx = framework.NodeContext(cfg, {"units": [*stale, "__rc=0"]})
    results, _ = execute.run_node_checks(cfg, ["config.units_loaded"], ctx=ctx)
    assert results[0].status == FAIL
    assert results[0].message.startswith("slurmd.service: the unit file or a drop-in changed on disk")
