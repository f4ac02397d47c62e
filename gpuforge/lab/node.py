"""One lab node: its root filesystem, identity files and systemd-nspawn container."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from . import plan
from .lab_record import LabPaths
from .sources import SUITE, HostMirrors, node_sources
from .system import (
    LabError,
    Proc,
    environ,
    mounts_under,
    processes,
    remove_tree,
    run,
    spawn_detached,
    stop_processes,
    write_file,
)

ENV_MARK = "GPUFORGE_LAB_MACHINE"
SSHD_CONF = (
    "# Written by gpuforge lab.\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
    "PermitRootLogin prohibit-password\n"
    "UseDNS no\n"
)
RESOLV_CONF = "# gpuforge lab: no DNS inside the lab; node names are in /etc/hosts.\n"

_overlay_ok: dict[str, bool] = {}


# --- root filesystem ---------------------------------------------------------------------------


def overlay_works(base: str, scratch_root: str) -> bool:
    """True if this kernel mounts overlayfs over ``base`` (tried once per process)."""
    if base in _overlay_ok:
        return _overlay_ok[base]
    os.makedirs(scratch_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".overlay-probe-", dir=scratch_root)
    try:
        for d in ("upper", "work", "merged"):
            os.mkdir(os.path.join(tmp, d))
        ok = _mount_overlay(base, os.path.join(tmp, "upper"), os.path.join(tmp, "work"), os.path.join(tmp, "merged"))
        if ok:
            ok = os.path.exists(os.path.join(tmp, "merged", "etc", "os-release"))
            run(["umount", os.path.join(tmp, "merged")], check=False)
    finally:
        if not mounts_under(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    _overlay_ok[base] = ok
    return ok


def _mount_overlay(lower: str, upper: str, work: str, merged: str) -> bool:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    return run(["mount", "-t", "overlay", "overlay", "-o", opts, merged], check=False).returncode == 0


def rootfs_mode(paths: LabPaths, node: str) -> str | None:
    """``overlay`` or ``copy`` for a node whose rootfs was made, else ``None``."""
    try:
        with open(os.path.join(paths.node_dir(node), "mode")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def prepare_rootfs(paths: LabPaths, node: str, base: str, mode: str, release: str = plan.DEFAULT_OS) -> str:
    """Make (or re-mount) the node's root filesystem of ``release`` from ``base``; return its path.

    A stopped node whose recorded release differs is re-imaged first (:func:`reimage_rootfs`)."""
    ndir, merged = paths.node_dir(node), paths.node_rootfs(node)
    recorded = os.path.join(ndir, "release")
    if os.path.exists(os.path.join(ndir, "mode")) and (_read(recorded).strip() or plan.DEFAULT_OS) != release:
        reimage_rootfs(paths, node)
    have = rootfs_mode(paths, node)
    if have is not None:
        mode = have
    os.makedirs(ndir, exist_ok=True)
    if mode == "overlay":
        upper, work = os.path.join(ndir, "upper"), os.path.join(ndir, "work")
        for d in (upper, work, merged):
            os.makedirs(d, exist_ok=True)
        if merged not in mounts_under(merged) and not _mount_overlay(base, upper, work, merged):
            raise LabError(f"{node}: cannot mount overlayfs of {base} on {merged}")
    elif not os.path.exists(os.path.join(merged, "etc", "os-release")):
        tmp = merged + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        run(["cp", "-a", "--reflink=auto", base, tmp], timeout=900)
        shutil.rmtree(merged, ignore_errors=True)
        os.rename(tmp, merged)
    write_file(os.path.join(ndir, "mode"), mode + "\n")
    write_file(recorded, release + "\n")
    return merged


def release_rootfs(paths: LabPaths, node: str) -> None:
    """Unmount the node's overlay (its upper layer stays for the next start)."""
    for mp in mounts_under(paths.node_dir(node)):
        if run(["umount", mp], check=False).returncode != 0:
            run(["umount", "-l", mp], check=False)


def reimage_rootfs(paths: LabPaths, node: str) -> None:
    """Drop the node's root filesystem (unmounted first) so that the next :func:`prepare_rootfs` makes
    it anew from another base: a re-imaged node keeps its name, address and host key, nothing else."""
    release_rootfs(paths, node)
    ndir = paths.node_dir(node)
    for part in ("upper", "work", "rootfs", "rootfs.partial", "mode"):
        path = os.path.join(ndir, part)
        if os.path.isdir(path) and not os.path.islink(path):
            remove_tree(path)
        elif os.path.lexists(path):
            os.unlink(path)


# --- identity --------------------------------------------------------------------------------


def ensure_keypair(path: str, comment: str) -> str:
    """Generate an ed25519 key at ``path`` unless it exists; return the public key text."""
    if not (os.path.exists(path) and os.path.exists(path + ".pub")):
        for p in (path, path + ".pub"):
            if os.path.exists(p):
                os.unlink(p)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
    with open(path + ".pub") as f:
        return f.read().strip()


def host_key(paths: LabPaths, node: str) -> str:
    """The node's host key pair (made on the host, kept in its node dir); return the public key."""
    return ensure_keypair(os.path.join(paths.node_dir(node), "ssh_host_ed25519_key"), f"root@{node}")


def write_identity(
    paths: LabPaths,
    node: str,
    rootfs: str,
    hosts: str,
    client_pub: str,
    mirrors: HostMirrors,
    proxy: str,
    suite: str = SUITE,
) -> bool:
    """Write hostname, hosts, machine-id, ssh keys, apt proxy/sources (Debian ``suite``) into the rootfs."""
    changed = False

    def put(rel: str, text: str, mode: int = 0o644) -> None:
        nonlocal changed
        changed |= write_file(os.path.join(rootfs, rel), text, mode)

    put("etc/hostname", f"{node}\n")
    put("etc/hosts", hosts)
    put("etc/resolv.conf", RESOLV_CONF)
    if len(_read(os.path.join(rootfs, "etc/machine-id")).strip()) != 32:
        put("etc/machine-id", secrets.token_hex(16) + "\n", 0o444)
    key = os.path.join(paths.node_dir(node), "ssh_host_ed25519_key")
    host_key(paths, node)
    with open(key) as f:
        put("etc/ssh/ssh_host_ed25519_key", f.read(), 0o600)
    with open(key + ".pub") as f:
        put("etc/ssh/ssh_host_ed25519_key.pub", f.read(), 0o644)
    put("etc/ssh/sshd_config.d/gpuforge-lab.conf", SSHD_CONF)
    os.makedirs(os.path.join(rootfs, "root/.ssh"), mode=0o700, exist_ok=True)
    os.chmod(os.path.join(rootfs, "root/.ssh"), 0o700)
    put("root/.ssh/authorized_keys", client_pub + "\n", 0o600)
    put("etc/apt/apt.conf.d/01gpuforge-proxy", f'Acquire::http::Proxy "{proxy}";\n')
    put("etc/apt/sources.list.d/debian.sources", node_sources(mirrors, suite))
    legacy = os.path.join(rootfs, "etc/apt/sources.list")
    if os.path.exists(legacy):
        os.unlink(legacy)
        changed = True
    return changed


# --- container ---------------------------------------------------------------------------------


def nspawn_processes(name: str, node: str | None = None) -> list[Proc]:
    """systemd-nspawn processes of lab ``name`` (of one node if given), found by machine name."""

    def match(argv: tuple[str, ...]) -> bool:
        if os.path.basename(argv[0]) != "systemd-nspawn":
            return False
        for a in argv:
            if a.startswith("--machine="):
                n = plan.machine_node(name, a.split("=", 1)[1])
                return n is not None and (node is None or n == node)
        return False

    return processes(match)


def orphan_inits(name: str, node: str | None = None) -> list[Proc]:
    """Container inits whose systemd-nspawn died (e.g. was SIGKILLed): still running, found by
    the ``GPUFORGE_LAB_MACHINE`` variable nspawn put into their environment."""
    nspawn = {p.pid for p in nspawn_processes(name)}
    out = []
    for p in processes(lambda argv: os.path.basename(argv[0]) == "systemd"):
        n = plan.machine_node(name, environ(p.pid).get(ENV_MARK, ""))
        if n is not None and (node is None or n == node) and _ppid(p.pid) not in nspawn:
            out.append(p)
    return out


def node_of_init(name: str, p: Proc) -> str | None:
    """The node an orphaned container init belongs to (from its environment)."""
    return plan.machine_node(name, environ(p.pid).get(ENV_MARK, ""))


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def nspawn_pid(name: str, node: str) -> int | None:
    procs = nspawn_processes(name, node)
    return procs[0].pid if procs else None


def running_nodes(name: str) -> dict[str, int]:
    """node -> systemd-nspawn pid for every running node of lab ``name`` (one scan of /proc)."""
    out: dict[str, int] = {}
    for p in nspawn_processes(name):
        n = node_of(name, p)
        if n is not None:
            out.setdefault(n, p.pid)
    return out


def start(
    paths: LabPaths, name: str, node: str, rootfs: str, netns_path: str, binds: Sequence[tuple[str, str]] = ()
) -> None:
    """Boot the node and wait until its systemd-nspawn runs."""
    spawn(paths, name, node, rootfs, netns_path, binds)
    wait_spawned(paths, name, [node])


def wait_spawned(paths: LabPaths, name: str, nodes: Sequence[str], timeout: float = 10) -> None:
    """Wait until each node's systemd-nspawn runs (``setsid --fork`` returns before the child has
    exec'd it); one /proc scan per poll for all of them."""
    deadline = time.monotonic() + timeout
    pending = set(nodes)
    while pending:
        pending -= set(running_nodes(name))
        if not pending:
            return
        if time.monotonic() > deadline:
            node = sorted(pending, key=plan.node_index)[0]
            log = paths.console(node)
            raise LabError(f"{node}: systemd-nspawn did not start; console log {log}:\n" + tail(log))
        time.sleep(0.05)


def spawn(
    paths: LabPaths, name: str, node: str, rootfs: str, netns_path: str, binds: Sequence[tuple[str, str]] = ()
) -> None:
    """Start the node's systemd-nspawn in its own session, console appended to its log (no wait);
    ``binds``: (host folder, path in the node) pairs, each ``--bind=`` (read-write, systemd-nspawn(1))."""
    os.makedirs(paths.console_dir, exist_ok=True)
    log = paths.console(node)
    if os.path.exists(log):
        os.replace(log, log + ".1")
    cmd = [
        "systemd-nspawn",
        f"--directory={rootfs}",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={plan.machine_name(name, node)}",
        f"--hostname={node}",
        f"--network-namespace-path={netns_path}",
        "--console=read-only",
        "--resolv-conf=off",
        "--link-journal=no",
        f"--setenv={ENV_MARK}={plan.machine_name(name, node)}",
        *(f"--bind={host}:{inside}" for host, inside in binds),
    ]
    spawn_detached(cmd, log)


def stop(name: str, nodes: Sequence[str] | None = None, timeout: float = 20) -> list[int]:
    """Stop the containers of ``nodes`` (all of the lab's if ``None``); return their pids.

    SIGTERM makes systemd-nspawn halt its container cleanly; inits left without their nspawn get
    SIGRTMIN+4 (systemd's "poweroff"), and SIGKILL if they do not go in time.
    """
    pids = [p.pid for p in nspawn_processes(name) if nodes is None or node_of(name, p) in nodes]
    stop_processes(pids, timeout=timeout)
    sel = [None] if nodes is None else list(nodes)
    orphans = [p.pid for n in sel for p in orphan_inits(name, n)]
    stop_processes(orphans, timeout=10, sig=signal.SIGRTMIN + 4)
    return pids + orphans


def node_of(name: str, p: Proc) -> str | None:
    for a in p.argv:
        if a.startswith("--machine="):
            return plan.machine_node(name, a.split("=", 1)[1])
    return None


def ssh_port_open(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=timeout):
            return True
    except OSError:
        return False


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def wait_booted(
    paths: LabPaths, name: str, nodes: Sequence[tuple[str, str]], ssh_base: Sequence[str], timeout: float
) -> None:
    """Wait until every (node, address) answers SSH (host key checked); raise naming the node."""
    deadline = time.monotonic() + timeout
    pending = dict(nodes)
    while pending:
        running = running_nodes(name)  # one /proc scan per round, not one per node
        for node in list(pending):
            if node not in running:
                raise LabError(
                    f"{node}: container exited during boot; console log {paths.console(node)}:\n"
                    + tail(paths.console(node))
                )
        listening = [(n, a) for n, a in pending.items() if ssh_port_open(a, 0.5)]

        def login(addr: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*ssh_base, "--", f"root@{addr}", "true"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )

        if listening:  # the logins of one round at once: a 48-node lab boots them together
            with ThreadPoolExecutor(max_workers=min(8, len(listening))) as pool:
                results = list(pool.map(login, [a for _, a in listening]))
            for (node, _), cp in zip(listening, results, strict=True):
                if cp.returncode == 0:
                    del pending[node]
                elif "REMOTE HOST IDENTIFICATION" in cp.stderr or "Host key verification" in cp.stderr:
                    raise LabError(f"{node}: host key does not match {paths.known_hosts}: {cp.stderr.strip()}")
        if pending and time.monotonic() > deadline:
            node = sorted(pending)[0]
            raise LabError(
                f"{', '.join(sorted(pending))} did not answer SSH within {timeout:.0f} s "
                f"(e.g. {node} at {pending[node]}:22); console log {paths.console(node)}:\n" + tail(paths.console(node))
            )
        if pending:
            time.sleep(0.3)
