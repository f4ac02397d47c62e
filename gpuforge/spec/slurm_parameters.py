"""Every parameter gpuforge writes into Slurm's config files, and the Slurm releases that accept it.

One row per ``(file, key)``; where the value decides what Slurm loads (a plugin, a mode) one row per
``(file, key, value)``. ``since`` is the first Slurm major release of :data:`CHECKED` that accepts it
(``21.08``, the oldest gpuforge runs, means "at least since"), ``removed`` the first that refuses or
ignores it (None: accepted through the newest checked). Each row was read in SchedMD's sources at the
tags of :data:`CHECKED`: the parser's key table (``s_p_options_t``) and the file's man page (``SOURCES``).

Invariant: :func:`problems` names every ``Key=Value`` of a rendered file that has no row here (an
uncited key) or whose row says a release of ``majors`` does not take it; it checks what gpuforge
renders, not ``slurm.extra_config`` (the site's own keys, passed as ``extra``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpuforge.spec import slurm_releases
from gpuforge.spec.citation import Citation
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Spec
from gpuforge.spec.slurm_mix_rules import group_slurm_versions

#: Major release -> the SchedMD/slurm tag whose man pages and parser were read (the distributions' own
#: releases: Ubuntu 22.04 21.08.5, Debian 12 22.05.8, Ubuntu 24.04 23.11.4, Debian 13 24.11.5).
CHECKED: dict[str, str] = {
    "21.08": "slurm-21-08-5-1",
    "22.05": "slurm-22-05-8-1",
    "23.02": "slurm-23-02-0-1",
    "23.11": "slurm-23-11-4-1",
    "24.05": "slurm-24-05-0-1",
    "24.11": "slurm-24-11-5-1",
    "25.05": "slurm-25-05-0-1",
    "25.11": "slurm-25-11-0-1",
    "26.05": "slurm-26-05-0-1",
}
FLOOR = "21.08"

#: Keys whose value is looked up too (a comma list is looked up item by item).
VALUED: frozenset[tuple[str, str]] = frozenset(
    {
        ("slurm.conf", "AuthType"),
        ("slurm.conf", "CredType"),
        ("slurm.conf", "SlurmctldParameters"),
        ("slurm.conf", "ProctrackType"),
        ("slurm.conf", "TaskPlugin"),
        ("slurm.conf", "JobAcctGatherType"),
        ("slurm.conf", "MpiDefault"),
        ("slurm.conf", "SelectType"),
        ("slurm.conf", "SelectTypeParameters"),
        ("slurm.conf", "SchedulerType"),
        ("slurm.conf", "TopologyPlugin"),
        ("slurm.conf", "PriorityType"),
        ("slurm.conf", "PreemptType"),
        ("slurm.conf", "AccountingStorageType"),
        ("slurm.conf", "JobCompType"),
        ("slurm.conf", "AccountingStorageEnforce"),
        ("slurm.conf", "OverSubscribe"),
        ("slurm.conf", "PreemptMode"),
        ("slurm.conf", "HealthCheckNodeState"),
        ("cgroup.conf", "CgroupPlugin"),
        ("gres.conf", "AutoDetect"),
        ("slurmdbd.conf", "AuthType"),
        ("slurmdbd.conf", "StorageType"),
    }
)


@dataclass(frozen=True)
class Parameter:
    """One key (or key and value) of one Slurm config file, with the releases that take it."""

    file: str
    key: str
    value: str | None
    since: str
    removed: str | None
    cites: tuple[str, ...]
    note: str = ""

    def accepted_by(self, major: str) -> bool:
        """``major`` (``YY.MM``) reads this key/value as gpuforge means it."""
        return _key(self.since) <= _key(major) and (self.removed is None or _key(major) < _key(self.removed))


def _key(major: str) -> tuple[int, int]:
    return int(major[:2]), int(major[3:5])


def _plain(file: str, keys: str, cites: tuple[str, ...]) -> list[Parameter]:
    """Rows for keys whose every value gpuforge writes is accepted from :data:`FLOOR` on."""
    return [Parameter(file, k, None, FLOOR, None, cites) for k in keys.split()]


SLURM_CONF = ("slurm-conf-parser", "slurm-conf-man")
NAMED = (
    "ClusterName SlurmctldHost SlurmUser SlurmctldPort SlurmdPort StateSaveLocation SlurmctldTimeout SlurmdTimeout "
    "SlurmdSpoolDir SlurmctldPidFile SlurmdPidFile SlurmctldLogFile SlurmdLogFile GresTypes ReturnToService "
    "PriorityDecayHalfLife PriorityWeightFairshare PriorityWeightAge PriorityWeightQOS PriorityWeightJobSize "
    "PriorityWeightPartition JobRequeue AccountingStorageHost AccountingStoragePort AccountingStorageTRES "
    "HealthCheckProgram HealthCheckInterval NodeName CPUs Sockets CoresPerSocket ThreadsPerCore RealMemory Gres "
    "Feature State PartitionName Nodes Default MaxTime DefaultTime MaxNodes PriorityTier QOS AllowAccounts "
    "PropagateResourceLimitsExcept"
)
NONE_NO_OP = (
    "the plugin was removed in 23.11 and the name kept as 'a true no-op' (read_config.c maps it to no plugin "
    "through 26.05); the man page lists preempt/none and jobcomp/none up to 24.05 and accounting_storage/none "
    "up to 22.05"
)

PARAMETERS: tuple[Parameter, ...] = (
    *_plain("slurm.conf", NAMED, SLURM_CONF),
    *(
        Parameter("slurm.conf", key, value, FLOOR, None, SLURM_CONF)
        for key, value in (
            ("AuthType", "auth/munge"),
            ("SlurmctldParameters", "enable_configless"),
            ("ProctrackType", "proctrack/cgroup"),
            ("ProctrackType", "proctrack/linuxproc"),
            ("TaskPlugin", "task/cgroup"),
            ("TaskPlugin", "task/affinity"),
            ("JobAcctGatherType", "jobacct_gather/cgroup"),
            ("JobAcctGatherType", "jobacct_gather/linux"),
            ("MpiDefault", "pmix"),
            ("SelectTypeParameters", "CR_Core_Memory"),
            ("SchedulerType", "sched/backfill"),
            ("TopologyPlugin", "topology/tree"),
            ("PriorityType", "priority/multifactor"),
            ("PreemptType", "preempt/qos"),
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
        )
    ),
    *(
        Parameter("slurm.conf", key, value, FLOOR, None, SLURM_CONF)
        for key, values in (
            ("AccountingStorageEnforce", "associations limits qos safe wckeys"),
            ("OverSubscribe", "NO YES FORCE"),
            ("PreemptMode", "OFF REQUEUE CANCEL SUSPEND"),
            ("HealthCheckNodeState", "ANY ALLOC CYCLE IDLE MIXED"),
        )
        for value in values.split()
    ),
    Parameter(
        "slurm.conf", "OverSubscribe", "EXCLUSIVE", FLOOR, None, (*SLURM_CONF, "exclusive-partitions"),
        "deprecated in 26.05 for the partition's Exclusive=NODE (which older releases lack); 26.05 still reads it",
    ),
    *(
        Parameter("slurm.conf", "HealthCheckNodeState", value, since, None, (*SLURM_CONF, "health-node-state"))
        for value, since in (("NONDRAINED_IDLE", "23.02"), ("START_ONLY", "25.11"), ("REBOOT_ONLY", "26.05"))
    ),
    Parameter("slurm.conf", "CredType", "cred/munge", FLOOR, None, (*SLURM_CONF, "slurm-credtype")),
    Parameter(
        "slurm.conf", "SelectType", "select/cons_tres", FLOOR, None, (*SLURM_CONF, "cons-res-removed"),
        "select/cons_res (not written) was removed in 23.11; cons_tres is the one SchedMD points to",
    ),
    Parameter("slurm.conf", "PreemptType", "preempt/none", FLOOR, None, (*SLURM_CONF, "none-no-op"), NONE_NO_OP),
    Parameter("slurm.conf", "JobCompType", "jobcomp/none", FLOOR, None, (*SLURM_CONF, "none-no-op"), NONE_NO_OP),
    Parameter(
        "slurm.conf", "AccountingStorageType", "accounting_storage/none", FLOOR, None, (*SLURM_CONF, "none-no-op"),
        NONE_NO_OP,
    ),
    Parameter(
        "cgroup.conf", "CgroupPlugin", "autodetect", FLOOR, None, ("cgroup-conf", "cgroup-v1-deprecated"),
        "autodetect picks cgroup/v2 on a cgroup v2 host from 22.05 (21.08 has cgroup/v1 only); cgroup/v1 is "
        "deprecated from 25.05",
    ),
    *_plain("cgroup.conf", "ConstrainCores ConstrainDevices ConstrainRAMSpace", ("cgroup-conf",)),
    Parameter("gres.conf", "AutoDetect", "off", FLOOR, None, ("gres-conf",)),
    Parameter(
        "gres.conf", "AutoDetect", "nvml", FLOOR, None, ("gres-conf",),
        "24.11 adds AutoDetect=nvidia (no NVML, no MIG) and 26.05 AutoDetect=full; nvml stays",
    ),
    *_plain("gres.conf", "NodeName Name Type File Count", ("gres-conf",)),
    *_plain("topology.conf", "SwitchName Nodes Switches", ("topology-conf",)),
    Parameter("slurmdbd.conf", "AuthType", "auth/munge", FLOOR, None, ("slurmdbd-conf",)),
    Parameter("slurmdbd.conf", "StorageType", "accounting_storage/mysql", FLOOR, None, ("slurmdbd-conf",)),
    *_plain(
        "slurmdbd.conf",
        "DbdHost DbdPort SlurmUser LogFile PidFile StorageHost StoragePort StorageUser StoragePass StorageLoc",
        ("slurmdbd-conf",),
    ),
)  # fmt: skip

TABLE: dict[tuple[str, str, str | None], Parameter] = {(p.file, p.key, p.value): p for p in PARAMETERS}


def spec_majors(spec: Spec) -> set[str]:
    """The Slurm major releases the spec's nodes run: ``versions.slurm`` where pinned (one build on every
    node), else each group's distribution release (``slurm_mix_rules``); empty where not known before the
    nodes are read (a site repository's unpinned version, Enterprise Linux's EPEL, a pin that is no Slurm
    release this table knows: its package may still exist, and apply says so if it does not)."""
    if spec.versions.slurm != "distro":
        try:
            major = slurm_releases.major_of(spec.versions.slurm)
        except ValueError:
            return set()
        return {major} if major in CHECKED else set()
    return {g.major for g in group_slurm_versions(spec)}


def row(file: str, key: str, value: str | None) -> Parameter | None:
    """The table's row for ``key`` (and ``value`` where the key is in :data:`VALUED`)."""
    return TABLE.get((file, key, value if (file, key) in VALUED else None))


def written(text: str) -> Iterator[tuple[str, str]]:
    """Every ``Key=Value`` of a rendered Slurm config file (``NodeName=... Gres=...`` lines give each pair;
    a comma list of a :data:`VALUED` key is handled by :func:`problems`)."""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        for word in shlex.split(line, comments=True):
            key, _, value = word.partition("=")
            yield key, value


def slurm_parameter_rules(spec: Spec) -> Iterator[SpecIssue]:
    """The states of ``slurm.health_check.node_state`` are ones the cluster's Slurm takes: Slurm logs any
    other as 'Invalid HealthCheckNodeState value ... ignored' and runs the check in every state."""
    s = spec.slurm
    if s is None or not s.health_check.enabled or s.health_check.interval == 0:
        return
    majors = sorted(spec_majors(spec), key=_key)
    known = sorted(p.value or "" for p in PARAMETERS if p.key == "HealthCheckNodeState")
    for state in s.health_check.node_state.split(","):
        found = row("slurm.conf", "HealthCheckNodeState", state)
        older = [m for m in majors if found is not None and not found.accepted_by(m)]
        if found is None:
            why = f"{state!r} is no HealthCheckNodeState state of Slurm ({', '.join(known)})"
        elif older:
            why = f"{state} came in Slurm {found.since}; this cluster runs Slurm {', '.join(older)}, which ignores it"
        else:
            continue
        yield SpecIssue(("slurm", "health_check", "node_state"), f"{why} (slurm.conf(5): HealthCheckNodeState)")


def _looked_up(file: str, text: str, extra: Iterable[str]) -> Iterator[tuple[str, str, Parameter | None]]:
    """``(key, value, row)`` for each ``Key=Value`` of ``text`` (a comma list of a :data:`VALUED` key item by
    item), the keys of ``extra`` left out."""
    skip = set(extra)
    for key, value in written(text):
        if key not in skip:
            for one in value.split(",") if (file, key) in VALUED else [value]:
                yield key, one, row(file, key, one)


def problems(file: str, text: str, majors: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """Each key of ``text`` (the rendered ``file``) that has no row, or that a release of ``majors`` refuses."""
    out: list[str] = []
    for key, one, found in _looked_up(file, text, extra):
        if found is None:
            out.append(f"{file}: {key}={one} has no row in gpuforge.spec.slurm_parameters (cite it)")
            continue
        out.extend(
            f"{file}: {key}={one} is not accepted by Slurm {m} (since {found.since}, removed {found.removed})"
            for m in majors
            if not found.accepted_by(m)
        )
    return out


def refused(file: str, text: str, major: str, extra: Iterable[str] = ()) -> list[str]:
    """``Key=Value (since S[, removed R])`` for each key of ``text`` whose row says Slurm ``major`` (one of
    :data:`CHECKED`) does not take it; a key without a row is :func:`problems`' to report, not refused."""
    return [
        f"{key}={one} (since {found.since}" + (f", removed in {found.removed})" if found.removed else ")")
        for key, one, found in _looked_up(file, text, extra)
        if found is not None and not found.accepted_by(major)
    ]


_TAGS = "tags " + ", ".join(CHECKED.values())

SOURCES: dict[str, Citation] = {
    "slurm-conf-parser": Citation(
        "Slurm's slurm.conf parser: the key table slurm_conf_options[] (s_p_options_t)",
        f"github.com/SchedMD/slurm src/common/read_config.c ({_TAGS})",
        "every key of this table's slurm.conf rows (and the node and partition keys) is an entry "
        "'{\"<Key>\", S_P_...}' of slurm_conf_options[] or the node/partition option tables at each tag",
    ),
    "slurm-conf-man": Citation(
        "slurm.conf(5), each release",
        f"https://slurm.schedmd.com/slurm.conf.html (current) ; github.com/SchedMD/slurm doc/man/man5/slurm.conf.5 "
        f"({_TAGS})",
        "each key is a '\\fB<Key>\\fR' entry at every tag; the plugin values are listed under their key, e.g. "
        "'\\fBjobacct_gather/cgroup\\fR (recommended)', '\\fBauth/munge\\fR', '\\fBcred/munge\\fR', "
        "'\\fBpmi2\\fR and \\fBpmix\\fR' (24.11, 26.05); 21.08: 'Acceptable values at present include "
        '"jobacct_gather/linux"\', \'Acceptable values at present include "auth/munge", which is the default.\'',
    ),
    "slurm-credtype": Citation(
        "SchedMD/slurm commit 6b88b0e49b 'Change CryptoType to CredType. Rename crypto/munge plugin to cred/munge.'",
        "gpuforge.spec.slurm_releases SOURCES['slurm-credtype'] ; doc/man/man5/slurm.conf.5 (24.11.5)",
        "'CredType The cryptographic signature tool to be used in the creation of job step credentials. "
        "Acceptable values at present are: cred/munge Indicates that Munge is to be used (default).' "
        "(cred/slurm is an alternative from 23.11; munge stays the default through 26.05)",
    ),
    "cons-res-removed": Citation(
        "Slurm 23.11 RELEASE_NOTES",
        "github.com/SchedMD/slurm RELEASE_NOTES (tag slurm-23-11-0-1)",
        "'Removed select/cons_res. Please update your configuration to select/cons_tres.'",
    ),
    "none-no-op": Citation(
        "SchedMD/slurm commits b9a7e80722 'Remove preempt/none, make it a true no-op.' (2023-03-18), 0cb96287a5 "
        "'Remove job_comp/none, make it a true no-op.', 332d015ef3 'Remove accounting_storage/none, make it a true "
        "no-op.' (2023-03-10); src/common/read_config.c",
        "github.com/SchedMD/slurm (first tag without src/plugins/*/none: slurm-23-11-0-1); read_config.c at "
        "slurm-26-05-0-1",
        'read_config.c (26.05): \'if (!s_p_get_string(&conf->preempt_type, "PreemptType", hashtbl) || '
        "!xstrcmp(conf->preempt_type, \"preempt/none\"))' ... '/* empty */'; 'else if "
        "(xstrcasestr(conf->job_comp_type, \"none\")) xfree(conf->job_comp_type);'; 'else if "
        '(xstrcasestr(conf->accounting_storage_type, "none")) xfree(conf->accounting_storage_type);\'',
    ),
    "exclusive-partitions": Citation(
        "slurm.conf(5) 26.05, Exclusive; the partition parser",
        "github.com/SchedMD/slurm doc/man/man5/slurm.conf.5, src/common/read_config.c (tag slurm-26-05-0-1); "
        "RELEASE_NOTES.md 26.05",
        '\'Exclusive Controls partition-level exclusivity together with OverSubscribe. Specify one of "NO", '
        '"NODE", "USER", or "TOPO". ... This replaces the deprecated options OverSubscribe=EXCLUSIVE, '
        "ExclusiveUser, and ExclusiveTopo.'; read_config.c: 'else if (xstrcasecmp(tmp, \"EXCLUSIVE\") == 0) "
        "p->max_share = 0; /* Exclusive=NODE */'; release notes: 'Exclusive=[NO|NODE|USER|TOPO] replaces "
        "ExclusiveUser and ExclusiveTopo when defining Partitions.'",
    ),
    "health-node-state": Citation(
        "Slurm's HealthCheckNodeState parser, _health_node_state()",
        f"github.com/SchedMD/slurm src/common/read_config.c ({_TAGS}, slurm-23-02-0-1, slurm-24-05-0-1)",
        "21.08, 22.05 take the tokens 'ANY' 'ALLOC' 'CYCLE' 'IDLE' 'MIXED'; 23.02 adds 'NONDRAINED_IDLE', 25.11 "
        "'START_ONLY', 26.05 'REBOOT_ONLY'; any other token: 'error(\"Invalid HealthCheckNodeState value %s "
        "ignored\", token);' (and ANY when no state is left)",
    ),
    "cgroup-conf": Citation(
        "cgroup.conf(5) and the cgroup.conf parser, each release",
        "https://slurm.schedmd.com/cgroup.conf.html ; github.com/SchedMD/slurm doc/man/man5/cgroup.conf.5, "
        f"src/common/cgroup.c (21.08) and src/interfaces/cgroup.c ({_TAGS})",
        '21.08: \'CgroupPlugin=<cgroup/v1|autodetect> ... Supported values at the moment are only "cgroup/v1" '
        '..., or "autodetect" which tries to determine which cgroup version does your system provide. ... The '
        "default value is \"autodetect\".' 22.05: '<cgroup/v1|cgroup/v2|autodetect>'; 24.11: "
        "'<cgroup/v1|cgroup/v2|autodetect|disabled>'; ConstrainCores, ConstrainDevices, ConstrainRAMSpace are "
        "'{\"<Key>\", S_P_BOOLEAN}' entries at every tag",
    ),
    "cgroup-v1-deprecated": Citation(
        "Slurm 25.05 RELEASE_NOTES.md, Deprecations and Removals; cgroup.conf(5) 26.05",
        "github.com/SchedMD/slurm RELEASE_NOTES.md (tag slurm-25-05-0-1), doc/man/man5/cgroup.conf.5 (slurm-26-05-0-1)",
        "'Marked cgroup/v1 support as deprecated.'; 'NOTE: cgroup/v1 plugin is deprecated and no new features "
        "will be added to it. It is recommended that you switch to cgroup/v2 at your earliest convenience.'",
    ),
    "gres-conf": Citation(
        "gres.conf(5) and the gres.conf parser, each release",
        "https://slurm.schedmd.com/gres.conf.html ; github.com/SchedMD/slurm doc/man/man5/gres.conf.5, "
        f"src/common/gres.c (21.08), src/interfaces/gres.c ({_TAGS})",
        "AutoDetect, every tag: '\\fBnvml\\fR Automatically detect NVIDIA GPUs' ... '\\fBoff\\fR Do not "
        "automatically detect any GPUs. Used to override other options.'; 24.11 adds '\\fBnvidia\\fR Automatically "
        "detect NVIDIA GPUs. No library required, but doesn't detect MIGs'; 26.05 RELEASE_NOTES.md: 'Add "
        "AutoDetect=full option to try all GRES plugin AutoDetection types on slurmd start.'",
    ),
    "topology-conf": Citation(
        "topology.conf(5); topology/tree's parser",
        "github.com/SchedMD/slurm doc/man/man5/topology.conf.5, src/plugins/topology/tree/topology_tree.c "
        f"(21.08), switch_record.c (26.05) ({_TAGS})",
        "'\\fBSwitchName\\fR The name of a switch.' at every tag; 26.05: 'NOTE: This file is ignored if "
        "topology.yaml(5) exists.' (gpuforge writes no topology.yaml)",
    ),
    "slurmdbd-conf": Citation(
        "slurmdbd.conf(5) and slurmdbd's parser, each release",
        f"github.com/SchedMD/slurm doc/man/man5/slurmdbd.conf.5, src/slurmdbd/read_config.c ({_TAGS})",
        "every key is a '\\fB<Key>\\fR' entry and a parser entry at each tag; 'StorageType Define the accounting "
        'storage mechanism type. Acceptable values at present include "accounting_storage/mysql".\'',
    ),
    "release-notes-24.11-on": Citation(
        "Slurm RELEASE_NOTES 24.11, RELEASE_NOTES.md 25.05, 25.11, 26.05: configuration changes and removals",
        "github.com/SchedMD/slurm (tags slurm-24-11-0-1, slurm-25-05-0-1, slurm-25-11-0-1, slurm-26-05-0-1)",
        "24.11 'CONFIGURATION FILE CHANGES' adds options only (SchedulerParameters, TopologyParam, "
        'DataParserParameters, SlurmctldParameters conmgr_*); removals: 25.05 \'Removed support for "FrontEnd" '
        "mode', 'Marked cgroup/v1 support as deprecated.'; 25.11 'Removed node_features/knl_generic plugin.'; "
        "26.05 'Remove SchedulerParameters=enable_job_state_cache.' None of them is a key or value gpuforge writes",
    ),
}
