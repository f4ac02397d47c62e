"""config.slurm_conf_hash: slurmctld's log records of slurm.conf hash mismatches, read through a real
shell from a log file, against each slurmd's start and slurmctld's last start or reconfigure."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuforge.probes.slurm_log import SLURMCTLD_CONF_HASH, conf_hash_log_command, parse_conf_hash_log
from gpuforge.validator.cluster_slurm_conf import current_mismatches

# Records as slurmctld writes them: the mismatch line as Debian 12's slurmctld (22.05) wrote it on the
# lab (tests/validator/test_config_drift_lab.py prints it); the start and reconfigure lines from
# SchedMD/slurm src/slurmctld/controller.c (info("slurmctld version %s started on cluster %s")) and
# proc_req.c (info("_slurm_rpc_reconfigure_controller: completed %s", TIME_STR), TIME_STR "usec=N").
TAIL = (
    "  This could cause issues with communication and functionality.  Please review both files and make sure they"
    " are the same.  If this is expected ignore, and set DebugFlags=NO_CONF_HASH in your slurm.conf."
)
LOG = f"""\
[2026-11-26T05:00:00.001] slurmctld version 22.05.8 started on cluster gflab
[2026-11-26T05:00:01.100] Node node1 now responding
[2026-11-26T05:01:00.500] error: Node node2 appears to have a different slurm.conf than the slurmctld.{TAIL}
[2026-11-26T05:02:00.000] error: Node node3 appears to have a different slurm.conf than the slurmctld.{TAIL}
[2026-11-26T05:03:00.000] _slurm_rpc_reconfigure_controller: completed usec=2012
[2026-11-26T05:03:00.400] error: Node node2 appears to have a different slurm.conf than the slurmctld.{TAIL}
"""


def read(tmp_path: Path, text: str | None) -> dict:  # type: ignore[type-arg]
    log = tmp_path / "slurmctld.log"
    if text is not None:
        log.write_text(text)
    cp = subprocess.run(["sh", "-c", conf_hash_log_command(str(log))], capture_output=True, text=True, check=True)
    return dict(parse_conf_hash_log(cp.stdout.splitlines()))


def test_the_log_is_read_through_a_shell_and_only_its_records_kept(tmp_path: Path) -> None:
    got = read(tmp_path, LOG)
    assert got == {
        "mismatched": {"node2": "2026-11-26T05:03:00.400", "node3": "2026-11-26T05:02:00.000"},
        "reread": "2026-11-26T05:03:00.000",
        "error": None,
    }
    assert SLURMCTLD_CONF_HASH.command() == conf_hash_log_command()


def test_a_mismatch_is_current_until_the_node_registers_again(tmp_path: Path) -> None:
    log = parse_conf_hash_log(LOG.splitlines())
    # node3's mismatch came before the reconfigure (it registered again and logged nothing: same hash);
    # node2's came after it: its slurmd still runs another slurm.conf.
    assert current_mismatches(log, {}) == {"node2": "2026-11-26T05:03:00.400"}
    # node2's slurmd restarted after the record: fixed.
    assert current_mismatches(log, {"node2": "2026-11-26T05:10:00"}) == {}
    # A start before the record changes nothing; one in the record's second (scontrol shows whole
    # seconds) is taken as the start that registered: the mismatch stays current.
    assert current_mismatches(log, {"node2": "2026-11-26T04:00:00"}) == {"node2": "2026-11-26T05:03:00.400"}
    assert current_mismatches(log, {"node2": "2026-11-26T05:03:00"}) == {"node2": "2026-11-26T05:03:00.400"}


def test_a_mismatch_in_the_reconfigures_second_but_before_it_is_not_current() -> None:
    """Slurm logs milliseconds: a registration at .200 came before a reconfigure completed at .900
    of the same second (a slurmd registering just before apply's reconfigure): it is not after it."""
    log = parse_conf_hash_log([
        f"[2026-11-26T05:03:00.200] error: Node node2 appears to have a different slurm.conf than the slurmctld.{TAIL}",
        "[2026-11-26T05:03:00.900] _slurm_rpc_reconfigure_controller: completed usec=2012",
    ])  # fmt: skip
    assert current_mismatches(log, {}) == {}


def test_a_log_that_cannot_be_read_says_so(tmp_path: Path) -> None:
    got = read(tmp_path, None)
    assert got["error"] == f"cannot read {tmp_path / 'slurmctld.log'} on the controller"
    assert got["mismatched"] == {}


def test_no_mismatch_logged(tmp_path: Path) -> None:
    got = read(tmp_path, "[2026-11-26T05:00:00.001] slurmctld version 22.05.8 started on cluster gflab\n")
    assert current_mismatches(parse_conf_hash_log([]), {}) == {}
    assert got["mismatched"] == {} and got["reread"] == "2026-11-26T05:00:00.001"
