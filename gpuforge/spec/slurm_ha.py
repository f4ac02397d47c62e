"""Slurm's controller failover: the state directory two controllers share, and the timeouts.

Facts (each cited in :data:`SOURCES`):

- ``SlurmctldHost`` may be given more than once; the first host named runs the daemon and the next
  one takes over when it fails (slurm.conf(5), ``slurm-conf-slurmctldhost``).
- ``StateSaveLocation`` holds every running and pending job; with a second ``SlurmctldHost`` it must
  be readable and writable by both (``slurm-conf-statesave``). gpuforge therefore refuses two
  controllers whose state directory is not on a shared mount the spec declares (``gpuforge.spec.storage_rules``).
- ``SlurmctldTimeout`` (default 120 s) is how long the backup waits for the primary before it takes
  control; ``SlurmdTimeout`` (default 300 s, 0 = never) how long slurmctld waits for a slurmd before it
  marks the node DOWN; neither may exceed 65533 (``slurm-conf-timeouts``). A reconfigure applies them
  (``slurm-upgrades-timeouts``), so both fields are ``live``.

Invariant: a :data:`SlurmPath` is an absolute path of plain components (letters, digits, ``. _ + -``),
without ``.``/``..`` components or doubled slashes: it lands in slurm.conf unquoted and in shell
commands, tar and systemd unit names, and no character of it means anything in any of them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from gpuforge.spec.citation import Citation
from gpuforge.spec.policy import live
from gpuforge.spec.strict import StrictModel

SLURM_CONF_MAN = "https://slurm.schedmd.com/slurm.conf.html"

SOURCES: dict[str, Citation] = {
    "slurm-conf-slurmctldhost": Citation(
        "slurm.conf(5), SlurmctldHost (Slurm 22.05.8, doc/man/man5/slurm.conf.5)",
        f"{SLURM_CONF_MAN} ; github.com/SchedMD/slurm doc/man/man5/slurm.conf.5 (tag slurm-22-05-8-1)",
        "'If specified more than once, the first hostname named will be where the daemon runs. If the first "
        "specified host fails, the daemon will execute on the second host.' 'A restart of slurmctld is required "
        "for changes to this parameter to take effect.'",
    ),
    "slurm-conf-statesave": Citation(
        "slurm.conf(5), StateSaveLocation and BackupController",
        f"{SLURM_CONF_MAN} ; github.com/SchedMD/slurm doc/man/man5/slurm.conf.5 (tag slurm-22-05-8-1)",
        "'If you have a secondary SlurmctldHost configured, this location should be readable and writable by "
        "both systems. Since all running and pending job information is stored here, the use of a reliable "
        "file system (e.g. RAID) is recommended.' 'A restart of slurmctld is required for changes to this "
        "parameter to take effect.' 'The backup controller recovers state information from the "
        "StateSaveLocation directory, which must be readable and writable from both the primary and backup "
        "controllers.'",
    ),
    "slurm-conf-timeouts": Citation(
        "slurm.conf(5), SlurmctldTimeout and SlurmdTimeout",
        f"{SLURM_CONF_MAN} ; github.com/SchedMD/slurm doc/man/man5/slurm.conf.5 (tag slurm-22-05-8-1)",
        "SlurmctldTimeout: 'The interval, in seconds, that the backup controller waits for the primary "
        "controller to respond before assuming control. The default value is 120 seconds. May not exceed "
        "65533.' SlurmdTimeout: 'The interval, in seconds, that the Slurm controller waits for slurmd to "
        "respond before configuring that node's state to DOWN. A value of zero indicates the node will not be "
        "tested ... The default value is 300 seconds. The value may not exceed 65533 seconds.'",
    ),
    "slurm-upgrades-timeouts": Citation(
        "Slurm Upgrade Guide, slurmctld (Controller)",
        "https://slurm.schedmd.com/upgrades.html#slurmctld ; github.com/SchedMD/slurm doc/html/upgrades.shtml",
        "'Increase configured SlurmdTimeout and SlurmctldTimeout values and execute scontrol reconfig for them "
        "to take effect.'",
    ),
    "scontrol-ping": Citation(
        "scontrol(1) ping; src/scontrol/scontrol.c _ping_slurmctld (22.05) / _print_ping (26.11)",
        "github.com/SchedMD/slurm src/scontrol/scontrol.c (tags slurm-22-05-8-1, slurm-23-11-4-1, master) ; "
        "https://slurm.schedmd.com/scontrol.html",
        "'Ping the primary and secondary slurmctld daemon and report if they are responding.' The code: "
        "'fprintf(stdout, \"Slurmctld(%s) at %s is %s\\n\", mode, ...hostname, state[...])' with state "
        "'{ \"DOWN\", \"UP\" }' and mode 'primary' (index 0), 'backup' (index 1 of 2) or 'backup%d'; "
        "exit 0 when any controller answered",
    ),
    "scontrol-takeover": Citation(
        "scontrol(1) takeover",
        "https://slurm.schedmd.com/scontrol.html ; github.com/SchedMD/slurm doc/man/man1/scontrol.1",
        "'Instruct one of Slurm's backup controllers (slurmctld) to take over system control.' '(Note: Slurm's "
        "primary controller will take the control back at startup.)'",
    ),
}

_COMPONENT = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,254}")
MAX_SLURM_PATH = 1024


def slurm_path(value: str) -> str:
    """An absolute path of plain components (see the module's invariant)."""
    parts = value.split("/")
    if (
        len(value) > MAX_SLURM_PATH
        or not value.startswith("/")
        or value == "/"
        or any(not _COMPONENT.fullmatch(p) or p in (".", "..") for p in parts[1:])
    ):
        raise ValueError(
            f"{value!r} is not an absolute path of plain components (letters, digits, '.', '_', '+', '-'; "
            "no '.' or '..' component, no doubled or trailing '/'; not '/')"
        )
    return value


SlurmPath = Annotated[str, AfterValidator(slurm_path)]


def path_within(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it (by whole components: /srv/a is not within /srv/ab)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


class Failover(StrictModel):
    """How long the controllers and slurmd wait for each other (slurm.conf; a reconfigure applies them)."""

    slurmctld_timeout: int = live(
        120,
        "SlurmctldTimeout: seconds the backup controller waits for the primary before it takes control "
        "(slurm.conf(5) default 120)",
        ge=1,
        le=65533,
    )
    slurmd_timeout: int = live(
        300,
        "SlurmdTimeout: seconds slurmctld waits for a slurmd before it marks the node DOWN (slurm.conf(5) "
        "default 300; 0: never). An upgrade of slurmd keeps running jobs as long as this is not reached",
        ge=0,
        le=65533,
    )


#: The state directory when the spec names none: what gpuforge always used (Debian's packages use
#: /var/lib/slurm/slurmctld as well).
DEFAULT_STATE_DIR = "/var/lib/slurm/slurmctld"


def parse_ping(text: str) -> list[tuple[str, str, bool]]:
    """``scontrol ping``'s lines as (mode, host, answered): mode ``primary``, ``backup`` or ``backupN``.

    Lines that are not controller lines (the ``RESTORE SLURMCTLD DAEMON TO SERVICE`` banner root sees
    when one is down, errors) are skipped; the order is the controllers' order in slurm.conf.
    """
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"\s*Slurmctld\((primary|backup\d*)\) at (\S+) is (UP|DOWN)\s*", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3) == "UP"))
    return out
