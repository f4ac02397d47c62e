"""The shell commands of a Slurm upgrade (``slurm_upgrade``), each a pure function of the spec.

Every command is one ``sh`` script run on one node as root; what it prints for the flow to read
starts with ``__`` (``__version=``, ``__dump=``, ``__state=``). Facts each command relies on:

- daemons print ``slurm <version>`` for ``-V`` (slurmdbd(8), slurmctld(8), slurmd(8): "-V Print
  version information and exit");
- SchedMD's upgrade procedure (``gpuforge.spec.slurm_releases``, ``upgrade-order``): stop slurmdbd,
  dump the database (``mysqldump --databases``), upgrade every Slurm package of the node together,
  start slurmdbd in the foreground as SlurmUser (``slurmdbd -D``) until it has converted the
  database, then under systemd; stop every slurmctld, back up StateSaveLocation, upgrade, start;
  slurmd in groups, running jobs kept while SlurmdTimeout is not reached;
- a dump is complete when its last line is mysqldump's ``-- Dump completed`` comment (on by default,
  ``mysqldump-comments``);
- a Debian package's maintainer scripts start and restart services through ``invoke-rc.d`` /
  ``deb-systemd-invoke``, which ask ``/usr/sbin/policy-rc.d`` first; exit status 101 forbids the
  action (invoke-rc.d(8), INIT SCRIPT POLICY): the upgrade writes one for the length of the install
  only (and refuses to run over a site's own), so that no daemon starts under systemd before its turn.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuforge.render.slurm import SLURM_PIN, slurm_pin_text, slurm_version_pin
from gpuforge.spec import Spec
from gpuforge.spec.citation import Citation
from gpuforge.spec.slurm_packages import SlurmSource

SOURCES: dict[str, Citation] = {
    "invoke-rc-d-policy": Citation(
        "invoke-rc.d(8), INIT SCRIPT POLICY (init-system-helpers)",
        "https://manpages.debian.org/bookworm/init-system-helpers/invoke-rc.d.8.en.html",
        "'invoke-rc.d is a generic interface to execute System V style init script /etc/init.d/name actions, "
        "obeying runlevel constraints as well as any local policies set by the system administrator.' 'All "
        "access to the init scripts by Debian packages' maintainer scripts should be done through "
        "invoke-rc.d.' The policy layer (/usr/sbin/policy-rc.d) 'may override an action to another "
        "action(s), or even deny it'; exit status 101: action forbidden by policy",
    ),
    "daemon-version": Citation(
        "slurmdbd(8), slurmctld(8), slurmd(8): -V",
        "https://slurm.schedmd.com/slurmdbd.html ; https://manpages.ubuntu.com/manpages/noble/man8/slurmdbd.8.html",
        "'-V Print version information and exit.' '-D Run slurmdbd in the foreground with logging copied to "
        "stdout.' (the version line reads 'slurm <version>', e.g. 'slurm 22.05.8'; Debian 12's build prints "
        "'slurm-wlm 22.05.8', as read on the lab, and gpuforge.probes.slurm reads both)",
    ),
}

#: The Slurm packages of a node, by package manager: every one installed moves together.
DEB_PATTERNS = {
    SlurmSource.DISTRO: "'slurm*' 'libslurm*' 'libpmi0' 'libpmi2-0' 'sview'",
    SlurmSource.SITE: "'slurm-smd*'",
    SlurmSource.BUILD: "'slurm-smd*'",
}
DBD_PORT = 6819


@dataclass(frozen=True)
class UpgradePaths:
    """Paths on the nodes (tests point them into a scratch directory)."""

    policy_rc: str = "/usr/sbin/policy-rc.d"
    dbd_log: str = "/var/log/slurm/gpuforge-slurmdbd-upgrade.log"
    dbd_pid: str = "/run/gpuforge-slurmdbd-upgrade.pid"
    apt_pin: str = SLURM_PIN


def q(value: str) -> str:
    return shlex.quote(value)


def versions_command() -> str:
    """``__version=<daemon> <version>`` for each Slurm daemon or command installed on the node."""
    return (
        "for d in slurmdbd slurmctld slurmd sinfo; do "
        'if command -v "$d" >/dev/null 2>&1; then echo "__version=$d $("$d" -V 2>&1 | head -n 1)"; fi; done'
    )


def parse_versions(text: str) -> dict[str, str]:
    """:func:`versions_command`'s output: daemon -> version (``slurm `` or Debian's ``slurm-wlm `` dropped)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("__version="):
            name, _, version = line[len("__version=") :].partition(" ")
            out[name] = version.strip().removeprefix("slurm-wlm ").removeprefix("slurm ").strip()
    return out


def candidate_command(spec: Spec, deb: bool) -> str:
    """The version the node's package manager would install for slurmdbd (``__candidate=``)."""
    site = spec.slurm is not None and spec.slurm.source.schedmd_packaging
    if deb:
        pkg = "slurm-smd-slurmdbd" if site else "slurmdbd"
        policy = f"apt-cache policy {pkg} | sed -n 's/^ *Candidate: //p'"
        return f'apt-get update -q >/dev/null && echo "__candidate=$({policy})"'
    return "echo \"__candidate=$(dnf -q repoquery --latest-limit 1 --qf '%{version}' slurm-slurmdbd 2>/dev/null)\""


def stop_command(unit: str) -> str:
    """Stop a unit and wait until systemd says it is no longer active (no data lost in flight)."""
    return (
        f"systemctl stop {unit} && for i in $(seq 1 120); do "
        f'[ "$(systemctl is-active {unit})" = active ] || exit 0; sleep 1; done; '
        f"echo '{unit} still active 120 s after stop' >&2; exit 1"
    )


def dump_command(database: str, backup_dir: str, running: str, stamp: str) -> str:
    """Dump the accounting database (slurmdbd stopped) into ``backup_dir`` and check it reads back whole:
    ``__dump=<path> <bytes>``; a dump without mysqldump's closing comment or a table fails."""
    dump = f"{backup_dir}/{database}-{running}-{stamp}.sql"
    return (
        f"install -d -m 0700 {q(backup_dir)} && "
        f"mysqldump --databases {q(database)} > {q(dump + '.partial')} && mv -f {q(dump + '.partial')} {q(dump)} && "
        f"tail -n 1 {q(dump)} | grep -q '^-- Dump completed' && grep -q 'CREATE TABLE' {q(dump)} && "
        f'echo "__dump={dump} $(wc -c < {q(dump)})" || '
        f"{{ echo 'the dump {dump} is missing, cut short or has no table: not upgrading' >&2; exit 1; }}"
    )


def state_backup_command(state_dir: str, backup_dir: str, running: str, stamp: str) -> str:
    """Archive StateSaveLocation (slurmctld stopped; earlier backups left out) and list it back."""
    tar = f"{backup_dir}/statesave-{running}-{stamp}.tar.gz"
    return (
        f"install -d -m 0700 {q(backup_dir)} && "
        f"tar -C {q(state_dir)} --exclude=./gpuforge-backup -czf {q(tar)} . && tar -tzf {q(tar)} >/dev/null && "
        f'echo "__state={tar} $(wc -c < {q(tar)})"'
    )


def install_command(spec: Spec, deb: bool, paths: UpgradePaths) -> str:
    """Upgrade every Slurm package of the node together, no daemon started by the packages."""
    if not deb:
        return "dnf -y -q upgrade 'slurm*'"
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    pin = (
        f"printf '%s' {q(slurm_pin_text(spec))} > {q(paths.apt_pin)}"
        if slurm_version_pin(spec)
        else f"rm -f {q(paths.apt_pin)}"
    )
    rc = q(paths.policy_rc)
    return (
        f"if [ -e {rc} ]; then echo '{paths.policy_rc} exists (a site policy): not upgrading over it' >&2; exit 1; fi; "
        f"printf '#!/bin/sh\\nexit 101\\n' > {rc} && chmod 0755 {rc} && trap 'rm -f {rc}' EXIT && "
        f"{pin} && "
        f"pkgs=$(dpkg-query -W -f '${{Package}} ${{db:Status-Status}}\\n' {DEB_PATTERNS[source]} 2>/dev/null "
        "| awk '$2 == \"installed\" {print $1}') && "
        "apt-get update -q >/dev/null && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confold "
        "--allow-downgrades --allow-change-held-packages $pkgs"
    )


def dbd_convert_start(paths: UpgradePaths) -> str:
    """slurmdbd in the foreground as SlurmUser, in its own session (it outlives this SSH command)."""
    log, pid = q(paths.dbd_log), q(paths.dbd_pid)
    return (
        f": > {log} && chown slurm {log} || exit 1; "
        f"setsid runuser -u slurm -- slurmdbd -D -v > {log} 2>&1 < /dev/null & echo $! > {pid}; "
        f'sleep 1; echo "__pid=$(cat {pid})"'
    )


#: ``alive PID``: the process runs (a zombie left for a busy reaper counts as gone).
ALIVE = 'alive() { s=$(ps -o stat= -p "$1" 2>/dev/null); [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }; '


def dbd_convert_poll(paths: UpgradePaths) -> str:
    """``__state=listening|running|exited`` and the log's last line (``__log=``)."""
    log, pid = q(paths.dbd_log), q(paths.dbd_pid)
    return (
        f"{ALIVE}if ss -Hltn 'sport = :{DBD_PORT}' | grep -q .; then echo __state=listening; "
        f'elif alive "$(cat {pid})"; then echo __state=running; else echo __state=exited; fi; '
        f'echo "__log=$(tail -n 1 {log} 2>/dev/null)"'
    )


def dbd_convert_finish(paths: UpgradePaths) -> str:
    """Stop the foreground slurmdbd (its whole session), then start it under systemd and wait for it."""
    pid = q(paths.dbd_pid)
    return (
        f'{ALIVE}p=$(cat {pid}) && kill -TERM "-$p" 2>/dev/null; '
        f'for i in $(seq 1 60); do alive "$p" || break; sleep 1; done; '
        f'if alive "$p"; then echo "the foreground slurmdbd ($p) did not stop" >&2; exit 1; fi; '
        f"rm -f {pid} && systemctl start slurmdbd && "
        f"for i in $(seq 1 60); do ss -Hltn 'sport = :{DBD_PORT}' | grep -q . && exit 0; sleep 1; done; "
        f"echo 'slurmdbd (systemd) is not listening on port {DBD_PORT} after 60 s' >&2; exit 1"
    )


def nodes_state_command(nodes: list[str]) -> str:
    """``name state`` per node from the controller (sinfo), to see a batch back in service."""
    return f"sinfo -h -N -n {q(','.join(nodes))} -o '%N %T'"
