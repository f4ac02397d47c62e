"""Which Slurm releases may be upgraded to which, in place: SchedMD's compatibility window.

A Slurm version ``23.11.4`` is major release ``23.11`` and maintenance release ``4``. An upgrade keeps
running jobs and accounting only from a major release the target lists as compatible; anything older
"will fail immediately upon startup" and must be done in steps. Slurm supported the previous two major
releases; from 24.11 on, the previous three (:data:`COMPATIBLE`, from SchedMD's Upgrade Guide table).

Invariant: :func:`upgrade_problem` returns ``None`` only for a target whose row names the running
major release (or the same major release: a maintenance upgrade); it refuses a downgrade, and a
target major release not in the table (unknown: gpuforge does not guess its window).
"""

from __future__ import annotations

import re

from gpuforge.spec.citation import Citation

#: Target major release -> the earlier major releases it upgrades from (SchedMD's table, and the
#: RELEASE_NOTES of the releases before the table).
COMPATIBLE: dict[str, tuple[str, ...]] = {
    "21.08": ("20.11", "20.02"),
    "22.05": ("21.08", "20.11"),
    "23.02": ("22.05", "21.08"),
    "23.11": ("23.02", "22.05"),
    "24.05": ("23.11", "23.02"),
    "24.11": ("24.05", "23.11", "23.02"),
    "25.05": ("24.11", "24.05", "23.11"),
    "25.11": ("25.05", "24.11", "24.05"),
    "26.05": ("25.11", "25.05", "24.11"),
    "26.11": ("26.05", "25.11", "25.05"),
    "27.05": ("26.11", "26.05", "25.11"),
}

SOURCES: dict[str, Citation] = {
    "upgrade-compatibility-window": Citation(
        "Slurm Upgrade Guide, Compatibility Window",
        "https://slurm.schedmd.com/upgrades.html#compatibility_window ; github.com/SchedMD/slurm "
        "doc/html/upgrades.shtml (master, 2026-08-20)",
        "'Slurm has long supported in-place upgrades from the previous two major releases. With the change to "
        "a 6-month cycle in 2024, Slurm 24.11 introduced compatibility with the previous three major releases.' "
        "Table 'Slurm Release | Compatible Prior Version': '23.11 | 23.02, 22.05', '24.05 | 23.11, 23.02', "
        "'24.11 | 24.05, 23.11, 23.02', '25.05 | 24.11, 24.05, 23.11', '25.11 | 25.05, 24.11, 24.05', "
        "'26.05 | 25.11, 25.05, 24.11', '26.11 | 26.05, 25.11, 25.05', '27.05 | 26.11, 26.05, 25.11'. "
        "'Upgrades from incompatible versions will fail immediately upon startup. It is required to perform "
        "upgrades from incompatible prior versions in steps' ... 'upgrading outside of their compatibility "
        "window will result in the jobs being killed and job accounting being lost.'",
    ),
    "release-notes-older": Citation(
        "Slurm RELEASE_NOTES 21.08, 22.05, 23.02 (before the table)",
        "github.com/SchedMD/slurm RELEASE_NOTES (tags slurm-21-08-8-2, 22.05, 23.02)",
        "21.08: 'Slurm can be upgraded from version 20.02 or 20.11 to version 21.08 without loss of jobs or "
        "other state information.' 22.05: 'Slurm can be upgraded from version 20.11 or 21.08 to version 22.05 "
        "without loss of jobs or other state information.' 23.02 (the Upgrade Guide's table): '23.02 | 22.05, "
        "21.08'",
    ),
    "upgrade-order": Citation(
        "Slurm Upgrade Guide, Upgrade Procedure, slurmdbd, slurmctld, slurmd",
        "https://slurm.schedmd.com/upgrades.html#procedure ; github.com/SchedMD/slurm doc/html/upgrades.shtml",
        "'Note the specific order in which the daemons should be upgraded: Prepare cluster for the upgrade; "
        "Create backups; Upgrade slurmdbd; Upgrade slurmctld; Upgrade slurmd (preferably with slurmctld)'. "
        "slurmdbd: 'Shutdown the slurmdbd daemon(s) gracefully' ... 'Backup the Slurm database' ... 'it is "
        "recommended to initially start the daemon directly as the configured SlurmUser: sudo -u slurm "
        "slurmdbd -D. When the daemon starts up for the first time after upgrading, it will take some extra "
        "time to update existing records in the database. If it is started with systemd and reaches the "
        "configured timeout value, it may be killed prematurely potentially causing data loss. After it "
        "finishes starting up, you can use Ctrl+C to exit, then start it normally with systemd.' Backups: "
        "'mysqldump --databases slurm_acct_db > /path/to/offline/storage/backup.sql'; 'Back up the contents of "
        "the configured StateSaveLocation.' slurmctld: 'When multiple slurmctld hosts are used, all should be "
        "upgraded simultaneously.' slurmd: 'Upgrades will not interrupt running jobs as long as SlurmdTimeout "
        "is not reached during the process.' 'It is also possible to perform a rolling upgrade by upgrading "
        "the slurmd nodes later in any number of groups.'",
    ),
    "slurm-credtype": Citation(
        "SchedMD/slurm commit 6b88b0e49b 'Change CryptoType to CredType. Rename crypto/munge plugin to "
        "cred/munge.' (2019-01-02, first in 19.05); doc/man/man5/slurm.conf.5; src/common/read_config.c",
        "https://slurm.schedmd.com/slurm.conf.html#OPT_CredType ; github.com/SchedMD/slurm src/common/read_config.c "
        "(tags slurm-19-05-0-1, slurm-22-05-8-1, master 2026-08-20)",
        "slurm.conf(5): 'CredType The cryptographic signature tool to be used in the creation of job step "
        "credentials. Acceptable values at present are: cred/munge Indicates that Munge is to be used (default)' "
        "(CryptoType is no longer documented); read_config.c from 19.05 to master reads 'CredType' and only "
        "without it the old 'CryptoType', swapping 'crypto' for 'cred' (Debian 12's 22.05.8 reads both alike)",
    ),
    "mysqldump-comments": Citation(
        "MariaDB documentation: mariadb-dump & mysqldump --comments, --dump-date",
        "https://mariadb.com/docs/reference/mdb/cli/mariadb-dump/comments/ ; "
        "https://mariadb.com/docs/reference/mdb/cli/mariadb-dump/dump-date/",
        "--comments: 'Write additional information. (Defaults to on; use --skip-comments to disable.)' "
        "--dump-date: 'Put a dump date to the end of the output. (Defaults to on ...)' (the last line reads "
        "'-- Dump completed on <date>'; a dump cut short has no such line)",
    ),
}

_VERSION = re.compile(r"(?:\d+:)?(\d{2})\.(\d{2})(?:\.(\d+))?")


def major_of(version: str) -> str:
    """``23.11`` of ``23.11.4``, ``23.11.4-1.2ubuntu5``, ``1:22.05.8-4+deb12u3`` or ``slurm 22.05.8``."""
    text = version.strip().removeprefix("slurm ").strip()
    m = _VERSION.match(text)
    if not m:
        raise ValueError(f"{version!r} is not a Slurm version (YY.MM[.N], as slurmdbd -V or a package prints it)")
    return f"{m.group(1)}.{m.group(2)}"


def upstream_of(version: str) -> str:
    """``22.05.8`` of the package version ``22.05.8-4+deb12u3`` (epoch and revision dropped)."""
    text = version.strip().removeprefix("slurm ").strip()
    m = _VERSION.match(text)
    if not m:
        raise ValueError(f"{version!r} is not a Slurm version")
    return ".".join(g for g in m.groups() if g is not None)


def upgrade_problem(running: str, target: str) -> str | None:
    """Why Slurm ``running`` cannot be upgraded in place to ``target`` (None: it can)."""
    have, want = major_of(running), major_of(target)
    if have == want:
        return None
    if (int(want[:2]), int(want[3:])) < (int(have[:2]), int(have[3:])):
        return (
            f"{upstream_of(target)} is older than the running {upstream_of(running)}: Slurm does not support "
            "downgrades once a daemon has started (restore the backups instead)"
        )
    if want not in COMPATIBLE:
        return f"Slurm {want} is not in gpuforge's table of SchedMD's compatibility window; it is not guessed"
    if have not in COMPATIBLE[want]:
        allowed = ", ".join(COMPATIBLE[want])
        return (
            f"Slurm {want} upgrades in place only from {allowed} (SchedMD's compatibility window); {have} is "
            f"further behind: upgrade in steps through those releases (jobs and accounting are lost otherwise)"
        )
    return None
