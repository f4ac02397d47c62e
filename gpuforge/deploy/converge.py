"""Converge one stack layer on one host: desired state + facts in, steps out.

A ``Layer`` is what a deploy wants on a host (packages, accounts, directories, files,
services). ``plan_layer`` compares it with one batched ``LayerState`` fact and returns
the steps that close the gap, nothing when the host already matches. The pyinfra
operation in ``gpuforge.deploy.operations.layer`` yields these steps; ``gpuforge plan`` prints
them. Keeping this pure keeps both honest and testable with facts as data.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuforge.deploy.apt import APT_INSTALL, APT_UPDATE, REPAIR, install_command
from gpuforge.deploy.package_manager import manager_of
from gpuforge.render.files import RenderedFile

__all__ = ["APT_INSTALL", "APT_UPDATE", "install_command"]

STAGING_DIR = "/var/lib/gpuforge/staging"
#: Where a non-root SSH user's uploads land before ``sudo`` copies them to ``STAGING_DIR``: a
#: directory only that user (and root) can enter, so no file content (a munge key) is ever
#: readable by other local users, not even for a moment (pyinfra's default is ``/tmp``).
UPLOAD_DIR = "/var/lib/gpuforge/upload"
#: Restarts and reloads owed to files already written: ``<unit>.<verb>`` marker files. A marker is
#: written BEFORE the file that needs it and removed only after the action succeeded, so a run
#: interrupted in between leaves the debt on the node and the next run pays it.
PENDING_DIR = "/var/lib/gpuforge/pending"
PENDING_VERBS = ("restart", "reload", "reconfigure")


def pending_marker(unit: str, verb: str) -> str:
    return f"{PENDING_DIR}/{unit}.{verb}"


def record_pending(unit: str, verb: str, why: str) -> Step:
    """The step that records, before a file is written, that ``unit`` will need ``verb``."""
    return Step(
        StepKind.PENDING,
        f"record that {unit} needs a {verb} ({why})",
        f"install -d -m 0700 {PENDING_DIR} && touch {pending_marker(unit, verb)}",
    )


def clear_pending(unit: str) -> str:
    """Shell suffix that removes ``unit``'s markers once its restart/reload has succeeded."""
    return " && rm -f " + " ".join(pending_marker(unit, v) for v in PENDING_VERBS)


@dataclass(frozen=True)
class Account:
    """A user and its own group with fixed IDs: a system account (no login) or a person's."""

    name: str
    uid: int
    home: str = "/nonexistent"
    gid: int | None = None
    """The group's ID (default: the UID)."""
    shell: str = "/usr/sbin/nologin"
    system: bool = True

    def summary(self) -> str:
        if self.system and self.gid in (None, self.uid):
            return f"create account {self.name} (uid/gid {self.uid})"
        return f"create user {self.name} (uid {self.uid}, gid {self.gid if self.gid is not None else self.uid})"

    def create_command(self) -> str:
        """groupadd (unless the group exists) + useradd; a person gets a home made from /etc/skel."""
        gid = self.gid if self.gid is not None else self.uid
        if self.system:
            return (
                f"getent group {self.name} >/dev/null || groupadd -r -g {gid} {self.name}; "
                f"useradd -r -u {self.uid} -g {self.name} -d {self.home} -s {self.shell} {self.name}"
            )
        return (
            f"getent group {self.name} >/dev/null || groupadd -g {gid} {self.name}; "
            f"useradd -m -u {self.uid} -g {self.name} -d {self.home} -s {self.shell} {self.name}"
        )


@dataclass(frozen=True)
class Directory:
    path: str
    mode: str = "0755"
    owner: str = "root"
    group: str = "root"


@dataclass(frozen=True)
class Service:
    """A systemd unit and what to do when its files change."""

    unit: str
    enabled: bool = True
    running: bool = True
    restart_on: tuple[str, ...] = ()
    reload_on: tuple[str, ...] = ()
    reload_command: str | None = None


@dataclass
class Layer:
    """Desired state of one stack layer on one host."""

    name: str
    packages: tuple[str, ...] = ()
    early_files: list[RenderedFile] = field(default_factory=list)
    """Files needed before packages install (apt pins, proxy)."""
    accounts: tuple[Account, ...] = ()
    directories: tuple[Directory, ...] = ()
    files: list[RenderedFile] = field(default_factory=list)
    services: tuple[Service, ...] = ()
    read_paths: tuple[str, ...] = ()
    """Files whose current content the planner needs (e.g. to classify a slurm.conf change)."""
    before_files: Callable[[LayerFacts], list[Step]] | None = None
    """Layer-specific steps before any file is written (record the actions the new files will need)."""
    before_services: Callable[[LayerFacts, set[str]], list[Step]] | None = None
    """Layer-specific steps between file changes and service (re)starts."""
    after: Callable[[LayerFacts, set[str]], list[Step]] | None = None
    """Layer-specific steps computed from the facts and the changed paths."""
    watch_packages: tuple[str, ...] = ()
    """Packages whose installed versions the layer's own steps read (in ``LayerFacts.packages``);
    those steps install them, ``plan_layer`` does not."""
    rpm: bool = False
    """The host's package database is rpm (RHEL): packages are read with ``rpm -q`` and installed with
    dnf (``package_manager``); the converge operation sets it from the node's platform row."""
    hold_pins: bool = False
    """Packages given as ``name=version`` are moved to that version when another one is installed
    (upgrade or downgrade), and the layer's services restart as after an install."""

    @classmethod
    def empty(cls, name: str) -> Layer:
        """A layer that wants nothing (the host does not carry the role)."""
        return cls(name)

    @property
    def is_empty(self) -> bool:
        return not (
            self.packages
            or self.watch_packages
            or self.early_files
            or self.accounts
            or self.directories
            or self.files
            or self.services
            or self.read_paths
            or self.before_files
            or self.before_services
            or self.after
        )

    @property
    def all_files(self) -> list[RenderedFile]:
        return [*self.early_files, *self.files]

    @property
    def fact_paths(self) -> list[str]:
        return [f.path for f in self.all_files] + [d.path for d in self.directories]


@dataclass
class LayerFacts:
    """What a host has, as read by the LayerState fact."""

    packages: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    units: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    accounts: dict[str, int | None] = field(default_factory=dict)
    contents: dict[str, str | None] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    """Marker names (``slurmd.restart``) in PENDING_DIR: actions an interrupted run still owes."""
    dpkg_interrupted: bool = False
    """An earlier dpkg run on the host was interrupted (journal entries or half-configured packages)."""


class StepKind(StrEnum):
    """What a step does (plans and reports show it; ``REPORTS`` are the kinds a person must read)."""

    ACCOUNT = "account"
    ANSIBLE = "ansible"
    APT_UPDATE = "apt-update"
    BUILD = "build"
    CDI = "cdi"
    CHMOD = "chmod"
    DAEMON_RELOAD = "daemon-reload"
    DATABASE = "database"
    DIRECTORY = "directory"
    DNF_MAKECACHE = "dnf-makecache"
    DRAIN = "drain"
    ENABLE = "enable"
    INITRAMFS = "initramfs"
    INSTALL = "install"
    KEYRING = "keyring"
    LINK = "link"
    MODULES = "modules"
    NOTE = "note"
    PENDING = "pending"
    REBOOT_REQUIRED = "reboot-required"
    RECONFIGURE = "reconfigure"
    RELOAD = "reload"
    REMOVE = "remove"
    REPAIR = "repair"
    RESTART = "restart"
    ROLLING = "rolling"
    SACCTMGR = "sacctmgr"
    START = "start"
    STOP = "stop"
    SWAP = "swap"
    SYSCTL = "sysctl"
    TMPFILES = "tmpfiles"
    UNAVAILABLE = "unavailable"
    UPGRADE = "upgrade"
    UPLOAD = "upload"
    USER = "user"
    VERIFY = "verify"
    WAIT = "wait"
    WARNING = "warning"


#: Steps that change nothing and tell a person something (kept in the run's reports).
REPORTS = frozenset({StepKind.NOTE, StepKind.REBOOT_REQUIRED, StepKind.ROLLING, StepKind.UNAVAILABLE, StepKind.WARNING})


@dataclass(frozen=True)
class Step:
    """One thing to do on a host. ``upload`` steps carry the file; others a shell command."""

    kind: StepKind
    summary: str
    command: str | None = None
    upload: RenderedFile | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "summary": self.summary}
        if self.command is not None:
            out["command"] = self.command
        if self.upload is not None:
            out["path"] = self.upload.path
        return out


def refresh_step(rpm: bool, why: str) -> Step:
    """The package index refresh of the host's package manager (``apt-get update``, ``dnf makecache``)."""
    pm = manager_of(rpm)
    return Step(StepKind(pm.refresh_kind), f"{pm.refresh_title} ({why})", pm.refresh)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _off_pin(pkg: str, facts: LayerFacts, rpm: bool = False) -> bool:
    """``name=version`` installed at another version. rpm reads ``version-release``: a pin without
    the release matches every release of its version."""
    if "=" not in pkg:
        return False
    have = facts.packages.get(package_name(pkg))
    want = pkg.split("=", 1)[1]
    if have is None:
        return False
    return have != want and not (rpm and have.startswith(f"{want}-"))


def package_name(spec: str) -> str:
    """``nvidia-driver=535.261.03-1`` -> ``nvidia-driver``."""
    return spec.split("=", 1)[0]


def file_differs(want: RenderedFile, have: dict[str, Any] | None) -> tuple[bool, bool]:
    """(content differs, attributes differ)."""
    if have is None or have.get("type") not in (None, "file"):
        return True, True
    content = have.get("sha256") != want.sha256
    attrs = (have.get("mode"), have.get("owner"), have.get("group")) != (want.mode, want.owner, want.group)
    return content, attrs


def plan_layer(layer: Layer, facts: LayerFacts) -> tuple[list[Step], set[str]]:
    """Steps that bring a host to ``layer``, and the paths whose content changes."""
    steps: list[Step] = []
    changed: set[str] = set()

    def file_steps(files: list[RenderedFile]) -> None:
        for f in files:
            content, attrs = file_differs(f, facts.files.get(f.path))
            if content:
                changed.add(f.path)
                what = "secret content (not shown)" if f.secret else f"{f.size} bytes"
                steps.append(Step(StepKind.UPLOAD, f"write {f.path} ({what}, {f.mode} {f.owner}:{f.group})", upload=f))
            elif attrs:
                steps.append(
                    Step(
                        StepKind.CHMOD,
                        f"fix mode/owner of {f.path} -> {f.mode} {f.owner}:{f.group}",
                        f"chmod {f.mode} {shlex.quote(f.path)} && chown {f.owner}:{f.group} {shlex.quote(f.path)}",
                    )
                )

    will_change = {f.path for f in layer.all_files if file_differs(f, facts.files.get(f.path))[0]}
    for svc in layer.services:
        if not svc.running:
            continue
        restart = sorted(p for p in svc.restart_on if p in will_change)
        reload_ = sorted(p for p in svc.reload_on if p in will_change)
        if restart:
            steps.append(record_pending(svc.unit, "restart", f"{', '.join(restart)} changes"))
        elif reload_:
            steps.append(record_pending(svc.unit, "reload", f"{', '.join(reload_)} changes"))
    if layer.before_files is not None:
        steps.extend(layer.before_files(facts))
    file_steps(layer.early_files)
    for acct in layer.accounts:
        have = facts.accounts.get(acct.name)
        if have is None:
            steps.append(
                Step(
                    StepKind.ACCOUNT if acct.system else StepKind.USER,
                    acct.summary(),
                    acct.create_command(),
                )
            )
        elif have != acct.uid:
            steps.append(
                Step(
                    StepKind.WARNING,
                    f"account {acct.name} has uid {have}, the cluster uses {acct.uid}: fix by hand "
                    "(files owned by it must be re-owned)",
                )
            )
    pm = manager_of(layer.rpm)
    missing = [p for p in layer.packages if facts.packages.get(package_name(p)) is None]
    if missing:
        named = ", ".join(pm.pin(p) for p in missing)
        steps.append(Step(StepKind.INSTALL, f"install {named}", pm.install(missing)))
    off_pin = [p for p in layer.packages if layer.hold_pins and p not in missing and _off_pin(p, facts, layer.rpm)]
    if off_pin:
        moves = ", ".join(
            f"{package_name(p)} {facts.packages[package_name(p)]} -> {p.split('=', 1)[1]}" for p in off_pin
        )
        steps.append(Step(StepKind.UPGRADE, f"to the pinned version: {moves}", pm.install(off_pin, downgrades=True)))
    steps.extend(directory_steps(layer.directories, facts))
    file_steps(layer.files)
    steps.extend(daemon_reload_steps(layer.services, facts, changed))
    if layer.before_services is not None:
        steps.extend(layer.before_services(facts, changed))
    steps.extend(service_steps(layer.services, facts, changed, installed=bool(missing or off_pin)))
    if layer.after is not None:
        steps.extend(layer.after(facts, changed))
    return steps, changed


def directory_steps(directories: tuple[Directory, ...], facts: LayerFacts) -> list[Step]:
    """Directories missing, or with another mode or owner, made as the layer wants them."""
    steps = []
    for d in directories:
        found = facts.files.get(d.path)
        if (
            found is None
            or found.get("type") != "directory"
            or (found.get("mode"), found.get("owner"), found.get("group")) != (d.mode, d.owner, d.group)
        ):
            steps.append(
                Step(
                    StepKind.DIRECTORY,
                    f"directory {d.path} ({d.mode} {d.owner}:{d.group})",
                    f"install -d -m {d.mode} -o {d.owner} -g {d.group} {shlex.quote(d.path)}",
                )
            )
    return steps


def daemon_reload_steps(services: tuple[Service, ...], facts: LayerFacts, changed: set[str]) -> list[Step]:
    """One ``daemon-reload`` when a unit file changes in this run, or when systemd says a service's
    unit changed on disk since it loaded it (an interrupted run wrote it without the reload)."""
    if any(p.startswith("/etc/systemd/") for p in changed):
        return [Step(StepKind.DAEMON_RELOAD, "systemctl daemon-reload", "systemctl daemon-reload")]
    stale = [s.unit for s in services if (facts.units.get(s.unit) or {}).get("NeedDaemonReload")]
    if not stale:
        return []
    what = f"systemctl daemon-reload ({', '.join(stale)} changed on disk since systemd loaded it)"
    return [Step(StepKind.DAEMON_RELOAD, what, "systemctl daemon-reload")]


def repair_steps(facts: LayerFacts) -> list[Step]:
    """Finish an interrupted dpkg run (its own, reported change) before any layer installs."""
    if not facts.dpkg_interrupted:
        return []
    return [Step(StepKind.REPAIR, "repair an interrupted package run (dpkg --configure -a)", REPAIR)]


def service_steps(
    services: tuple[Service, ...], facts: LayerFacts, changed: set[str], installed: bool = False
) -> list[Step]:
    """Enable/start services and restart or reload those whose files changed, or that an
    interrupted earlier run left owing a restart or reload (pending markers)."""
    steps: list[Step] = []
    for svc in services:
        state = facts.units.get(svc.unit) or {}
        active = state.get("ActiveState") == "active"
        enabled = state.get("UnitFileState") in ("enabled", "static", "alias", "indirect", "generated")
        if svc.enabled and not enabled:
            steps.append(Step(StepKind.ENABLE, f"enable {svc.unit}", f"systemctl enable {svc.unit}"))
        owed = {v for v in PENDING_VERBS if f"{svc.unit}.{v}" in facts.pending}
        restart = any(p in changed for p in svc.restart_on) or "restart" in owed
        reload_ = any(p in changed for p in svc.reload_on) or "reload" in owed
        clear = clear_pending(svc.unit) if (restart or reload_ or owed) else ""
        by_files = any(p in changed for p in (*svc.restart_on, *svc.reload_on))
        owed_verb = "restart" if restart else "reload"
        why = "config changed" if by_files or not owed else f"a {owed_verb} is pending on the node"
        if svc.running and (not active or installed):
            # A service a package just started runs with the package's config: restart it on ours.
            verb = StepKind.RESTART if (restart or reload_ or installed) else StepKind.START
            steps.append(Step(verb, f"{verb} {svc.unit}", f"systemctl {verb} {svc.unit}{clear}"))
        elif svc.running and restart:
            steps.append(Step(StepKind.RESTART, f"restart {svc.unit} ({why})", f"systemctl restart {svc.unit}{clear}"))
        elif svc.running and reload_:
            cmd = svc.reload_command or f"systemctl reload {svc.unit}"
            steps.append(Step(StepKind.RELOAD, f"reload {svc.unit} ({why})", f"{cmd}{clear}"))
        if not svc.running and active:
            steps.append(Step(StepKind.STOP, f"stop {svc.unit}", f"systemctl stop {svc.unit}{clear}"))
        elif not svc.running and owed:
            steps.append(Step(StepKind.PENDING, f"forget {svc.unit}'s owed actions (it does not run here)", clear[4:]))
    return steps


def sudo_upload_dir_command(user: str) -> str:
    """Create (or re-own) the login user's private upload directory, as root."""
    return f"install -d -m 0755 /var/lib/gpuforge && install -d -m 0700 -o {shlex.quote(user)} {UPLOAD_DIR}"


def sudo_upload_temp(staged: str) -> str:
    """The upload's path in ``UPLOAD_DIR`` (same name as its staging path)."""
    return f"{UPLOAD_DIR}/{staged.rsplit('/', 1)[-1]}"


def upload_commands(f: RenderedFile) -> tuple[str, str]:
    """(staging path, command installing it in place with its mode and owner).

    The file is never half-written where readers look: it is installed with its mode and owner
    as a temporary file in the destination's directory, then renamed over the destination
    (atomic within one filesystem). An interruption leaves the old file or the new one.
    """
    staged = f"{STAGING_DIR}/{sha256(f.path.encode())[:16]}"
    dest = shlex.quote(f.path)
    tmp = shlex.quote(f"{f.path}.gpuforge-new")
    cmd = f"install -D -m {f.mode} -o {f.owner} -g {f.group} {staged} {tmp} && mv -fT {tmp} {dest} && rm -f {staged}"
    return staged, cmd
