"""slurmctld's log as a reading: which nodes registered with a slurm.conf hash other than the
controller's, and when slurmctld last (re)read its own config.

Each slurmd sends a hash of the slurm.conf it parsed when it registers (at its start and after
``scontrol reconfigure``); where it differs, slurmctld logs ``error: Node <name> appears to have a
different slurm.conf than the slurmctld`` and nothing else tells (``scontrol`` shows no hash).
"""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from gpuforge.probes.reading import Reading

#: Where the rendered slurm.conf sends slurmctld's log (templates/slurm/slurm.conf.j2: SlurmctldLogFile).
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
#: Lines of the matching log records read (the newest).
LOG_LINES = 2000
MISMATCH = "appears to have a different slurm.conf than the slurmctld"
STARTED = "slurmctld version "
RECONFIGURED = "_slurm_rpc_reconfigure_controller: completed"
_STAMP = re.compile(r"^\[(?P<t>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?)\]\s*(?P<rest>.*)$")
_NODE = re.compile(r"error: Node (?P<node>\S+) " + re.escape(MISMATCH))


class ConfHashLog(TypedDict):
    """Per node, the time of its newest logged mismatch; the newest slurmctld start or completed
    reconfigure (after which every slurmd registers again); why the log could not be read."""

    mismatched: dict[str, str]
    reread: str | None
    error: str | None


def conf_hash_log_command(path: str = SLURMCTLD_LOG) -> str:
    """The newest log records about config hashes, starts and reconfigures (``__missing=`` when unreadable)."""
    q = shlex.quote(path)
    pattern = shlex.quote(f"{MISMATCH}|{STARTED}.* started on cluster|{RECONFIGURED}")
    return f"if [ -r {q} ]; then grep -E {pattern} {q} | tail -n {LOG_LINES}; else echo __missing={path}; fi"


def parse_conf_hash_log(lines: list[str]) -> ConfHashLog:
    """Times as Slurm writes them (ISO 8601, the controller's local time, milliseconds kept: a
    registration logged in the same second as, but before, a reconfigure is not after it)."""
    missing = next((line.split("=", 1)[1].strip() for line in lines if line.startswith("__missing=")), None)
    if missing is not None:
        return ConfHashLog(mismatched={}, reread=None, error=f"cannot read {missing} on the controller")
    mismatched: dict[str, str] = {}
    reread: str | None = None
    for line in lines:
        m = _STAMP.match(line.strip())
        if m is None:
            continue
        when, rest = m.group("t"), m.group("rest")
        node = _NODE.search(rest)
        if node:
            mismatched[node.group("node")] = max(when, mismatched.get(node.group("node"), when))
        elif RECONFIGURED in rest or STARTED in rest:
            reread = when if reread is None else max(reread, when)
    return ConfHashLog(mismatched=mismatched, reread=reread, error=None)


SLURMCTLD_CONF_HASH: Reading[ConfHashLog] = Reading("slurm.ctld_conf_hash", conf_hash_log_command, parse_conf_hash_log)
