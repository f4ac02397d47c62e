"""``scheduler.slurm_version``: the Slurm each node has installed and runs, against the one the spec implies.

The node program reads the node's versions (:mod:`gpuforge.probes.slurm_version`: each binary's ``-V``,
the local slurmd's own ``Version``, the answering slurmctld's ``SLURM_VERSION``) in the round trip of
the node checks; they are judged here, where the spec is:

* the version the spec implies (:func:`expected_slurm`): ``versions.slurm`` where pinned, else the
  node's distribution archive's (``slurm.source: distro``; ``gpuforge.spec.slurm_gpu``'s table, the one
  ``slurm_mix_rules`` uses), else none is known before the nodes are read (a site's repository);
* a daemon that runs another version than its installed binary (packages changed, daemon not
  restarted);
* every ``Key=Value`` of the rendered slurm.conf against the running release's row in
  ``gpuforge.spec.slurm_parameters`` (``slurm.extra_config`` keys are the site's own, not checked).

Invariants: a version is compared as ``YY.MM.N`` (Slurm prints no package revision: a Debian rebuild
``+deb12u3`` of the same release is the same here); only versions and host names that match the
probe's patterns are taken from a node's answer, so nothing else a node prints reaches the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.probes.slurm_version import BINARIES, HOST, VERSION
from gpuforge.render.slurm import slurm_conf, slurm_version_pin
from gpuforge.spec import Role, Spec, slurm_gpu
from gpuforge.spec.citation import Citation
from gpuforge.spec.nodes import Node
from gpuforge.spec.slurm_packages import SlurmSource
from gpuforge.spec.slurm_parameters import CHECKED, refused
from gpuforge.spec.slurm_releases import major_of, upgrade_problem, upstream_of
from gpuforge.validator.cluster import ClusterData, cluster_check, gate_slurm_node
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, Outcome
from gpuforge.validator.node.inputs import SLURM_VERSIONS

SLURM_VERSION_CHECK = "scheduler.slurm_version"
_TAGS = "tags slurm-22-05-8-1, slurm-23-02-0-1, slurm-23-11-4-1, slurm-24-05-0-1, slurm-24-11-5-1, " \
    "slurm-25-05-0-1, slurm-25-11-0-1, slurm-26-05-0-1 (and slurm-26-05-3-1)"  # fmt: skip

#: Where each line the probe reads is printed, the same at every tag read.
SOURCES: dict[str, Citation] = {
    "version-flag": Citation(
        "print_slurm_version(), called for -V by sinfo, scontrol, slurmd, slurmctld and slurmdbd",
        f"github.com/SchedMD/slurm src/common/proc_args.c, src/slurmd/slurmd/slurmd.c, src/slurmctld/controller.c, "
        f"src/slurmdbd/slurmdbd.c, src/sinfo/opts.c; META ({_TAGS})",
        "'void print_slurm_version(void) { printf(\"%s %s\\n\", PACKAGE_NAME, SLURM_VERSION_STRING); }' and "
        "\"case 'V': print_slurm_version();\"; META 'Name: slurm', 'Version: 24.11.5' (so 'slurm 24.11.5'; "
        "Debian's build prints 'slurm-wlm 22.05.8': gpuforge.orchestrate.slurm_upgrade_commands "
        "SOURCES['daemon-version'], read on the lab)",
    ),
    "slurmd-status": Citation(
        "scontrol show slurmd: slurm_load_slurmd_status() and slurm_print_slurmd_status()",
        f"github.com/SchedMD/slurm src/api/config_info.c, src/slurmd/slurmd/req.c _rpc_daemon_status, "
        f"src/scontrol/scontrol.c _print_slurmd ({_TAGS})",
        "'slurm_load_slurmd_status - issue RPC to get the status of slurmd daemon on this machine' (REQUEST_"
        "DAEMON_STATUS to this host's slurmd, r_uid SLURM_AUTH_UID_ANY); the daemon answers "
        "'resp->version = xstrdup(SLURM_VERSION_STRING);'; printed as 'fprintf(out, \"Version                  "
        "= %s\\n\", slurmd_status_ptr->version);'",
    ),
    "ctld-config": Citation(
        "scontrol show config: SLURM_VERSION is the answering slurmctld's own version",
        f"github.com/SchedMD/slurm src/slurmctld/proc_req.c _fill_ctld_conf, src/api/config_info.c "
        f"slurm_ctl_conf_2_key_pairs and slurm_print_key_pairs ({_TAGS})",
        "slurmctld fills 'conf_ptr->version = xstrdup(SLURM_VERSION_STRING);'; the client lists it as "
        "'SLURM_VERSION' (22.05: 'key_pair->name = xstrdup(\"SLURM_VERSION\"); key_pair->value = "
        'xstrdup(slurm_ctl_conf_ptr->version);\', 24.11 on: \'add_key_pair(ret_list, "SLURM_VERSION", "%s", '
        "conf->version);') and prints each pair as 'fprintf(out, \"%-23s = %s\\n\", key_pair->name, "
        "key_pair->value);'; the 26.05 data_parser describes it as 'Version of slurmctld'",
    ),
    "ctld-ping": Citation(
        "scontrol show config ends with the controllers' ping lines; the client asks the controllers in order",
        f"github.com/SchedMD/slurm src/scontrol/scontrol.c _print_config, _ping_slurmctld / _print_ping; "
        f"src/common/slurm_protocol_api.c _open_controller ({_TAGS})",
        "_print_config: 'slurm_print_ctl_conf (stdout, slurm_ctl_conf_ptr);' then the ping, 'fprintf(stdout, "
        '"Slurmctld(%s) at %s is %s\\n", mode, control_machine[i], state[status]);\' per SlurmctldHost in '
        "order (gpuforge.spec.slurm_ha SOURCES['scontrol-ping']); _open_controller tries 'for (int i = 0; i < "
        "proto_conf->control_cnt; i++)' from the first: the first controller up is the one that answered",
    ),
}


@dataclass(frozen=True)
class Expected:
    """The Slurm version the spec implies for a node (``version`` None: not known before the nodes are read)."""

    version: str | None
    source: str
    pinned: bool


def expected_slurm(spec: Spec, node: Node) -> Expected:
    """``versions.slurm`` where pinned, else the node's distribution archive's Slurm (``slurm.source: distro``)."""
    pin = slurm_version_pin(spec)
    if pin is not None:
        try:
            return Expected(upstream_of(pin), f"versions.slurm {pin}", True)
        except ValueError:
            return Expected(None, f"versions.slurm {pin} is no Slurm version gpuforge can read", True)
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    title = node.os.distribution.title
    if source is not SlurmSource.DISTRO:
        return Expected(
            None, f"slurm.source {source.value} with versions.slurm distro takes the repository's version", False
        )
    row = slurm_gpu.nvml_plugin(node.os)
    if row is None or row.archive_slurm is None:
        return Expected(None, f"gpuforge's table names no Slurm of the {title} archive", False)
    return Expected(upstream_of(row.archive_slurm), f"the {title} archive, {row.archive_slurm}", False)


def _numbers(version: str) -> tuple[int, ...]:
    """``(24, 11, 5)`` of ``24.11.5`` or ``24.11.5-1``; ``(24, 11, 0)`` of a pin without a maintenance release."""
    parts = [int(p) for p in upstream_of(version).split(".")]
    return (*parts, 0)[:3]


def reported(raw: Any, node: Node) -> tuple[dict[str, str], dict[str, str]]:
    """(installed by binary, running by daemon) from the node's answer, only values that match the
    probe's patterns; the running slurmctld only where this node answered ``scontrol show config``."""
    if not isinstance(raw, dict):
        return {}, {}

    def versions(key: str, names: tuple[str, ...]) -> dict[str, str]:
        got = raw.get(key)
        if not isinstance(got, dict):
            return {}
        return {k: v for k, v in got.items() if k in names and isinstance(v, str) and VERSION.fullmatch(v)}

    running = versions("running", ("slurmd", "slurmctld"))
    answered = raw.get("slurmctld_from")
    if not (isinstance(answered, str) and HOST.fullmatch(answered) and answered == node.name):
        running.pop("slurmctld", None)
    if not node.has(Role.COMPUTE):
        running.pop("slurmd", None)
    return versions("installed", BINARIES), running


def way_out(have: str, want: Expected) -> str:
    """What brings a node that runs ``have`` to the spec's ``want.version``."""
    assert want.version is not None
    if _numbers(have) > _numbers(want.version):
        return (
            f"it is newer than the spec's: Slurm does not support downgrades once a daemon has started; "
            f"set versions.slurm to the package of {have}"
        )
    if major_of(have) == major_of(want.version):
        if want.pinned:
            return (
                f"'gpuforge apply' installs {want.source} (a maintenance release of {major_of(have)}; "
                "'gpuforge slurm-upgrade' does it without draining)"
            )
        return "'gpuforge slurm-upgrade' moves it to what the package manager offers"
    problem = upgrade_problem(have, want.version)
    if problem:
        return f"'gpuforge slurm-upgrade' refuses this jump: {problem}"
    return "'gpuforge slurm-upgrade' upgrades it in SchedMD's order (slurmdbd, slurmctld, then slurmd)"


def _listed(by_version: dict[str, list[str]]) -> str:
    return "; ".join(f"{v} ({', '.join(names)})" for v, names in sorted(by_version.items()))


def judge_versions(
    node: str, want: Expected, installed: dict[str, str], running: dict[str, str], refusals: dict[str, list[str]]
) -> Outcome:
    """One node's row. ``refusals``: per release the node runs, the rendered slurm.conf's keys it does not
    take (a release missing: gpuforge's table does not know it)."""
    if not installed and not running:
        return FAIL, (
            f"no Slurm binary on {node} answers -V ({', '.join(BINARIES)}): is Slurm installed? 'gpuforge apply' "
            "installs it"
        )
    stale = {d for d, v in running.items() if d in installed and _numbers(installed[d]) != _numbers(v)}
    found = [
        f"{d} on {node} runs {running[d]} but {installed[d]} is installed (packages changed, daemon not "
        f"restarted): restart {d} (systemctl restart {d})"
        for d in sorted(stale)
    ]
    # A daemon not restarted is judged by what it has installed: a restart, not an upgrade, brings it there.
    current = {d: v for d, v in running.items() if d not in stale}
    by_version: dict[str, list[str]] = {}
    for name, version in sorted({**installed, **current}.items()):
        by_version.setdefault(upstream_of(version), []).append(f"{name} running" if name in current else name)
    if want.version is not None:
        for version, names in sorted(by_version.items()):
            if _numbers(version) != _numbers(want.version):
                found.append(
                    f"{node} has Slurm {version} ({', '.join(names)}), the spec implies {want.version} "
                    f"({want.source}): {way_out(version, want)}"
                )
    for major, keys in sorted(refusals.items()):
        if keys:
            found.append(f"Slurm {major} on {node} does not take slurm.conf's {', '.join(keys)}")
    if found:
        return FAIL, "; ".join(found)
    unknown = sorted(m for m in {major_of(v) for v in by_version} if m not in refusals)
    note = f"; gpuforge's parameter table does not know Slurm {', '.join(unknown)}" if unknown else ""
    if want.version is None:
        return PASS, f"Slurm {_listed(by_version)}; the spec implies no version ({want.source}){note}"
    return PASS, f"Slurm {_listed(by_version)}, as the spec implies ({want.source}){note}"


def refusals_for(spec: Spec, versions: list[str]) -> dict[str, list[str]]:
    """Per release of ``versions`` that gpuforge's parameter table knows, the rendered slurm.conf's refused keys."""
    assert spec.slurm is not None
    majors = {major_of(v) for v in versions} & set(CHECKED)
    text = slurm_conf(spec)
    return {m: refused("slurm.conf", text, m, spec.slurm.extra_config) for m in sorted(majors)}


@cluster_check(SLURM_VERSION_CHECK, "scheduler", CRITICAL,
               "Slurm runs the version the spec implies (installed = running; slurm.conf's keys taken by it)",
               depends_on=("connection.ssh",), gate=gate_slurm_node)  # fmt: skip
def slurm_version(data: ClusterData, node: Node) -> Outcome:
    raw = data.node_data.get(node.name, {}).get(SLURM_VERSIONS.key)
    if raw is None:
        return FAIL, "the node program returned no Slurm versions (an older node program?)"
    installed, running = reported(raw, node)
    effective = [*installed.values(), *running.values()]
    return judge_versions(
        node.name, expected_slurm(data.spec, node), installed, running, refusals_for(data.spec, effective)
    )
