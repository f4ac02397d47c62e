"""``up``, ``down``, ``status`` and ``ssh``: the lab's Python API."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from . import hostlimits, mirror, network, node, plan
from .image_base import image_rootfs
from .lab_record import LabPaths, LabState, NodeState, SharedFolder, load_state, save_state
from .rootfs import ensure_rootfs
from .sources import HostMirrors, host_mirrors
from .system import (
    REQUIRED_TOOLS,
    LabError,
    file_lock,
    mounts_under,
    remove_tree,
    require_root,
    require_tools,
    write_file,
)

Log = Callable[[str], None]
BOOT_TIMEOUT = 120.0


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ssh_options(key: str, known_hosts: str) -> list[str]:
    """ssh options for lab nodes: the lab key, the lab known_hosts, host-key checking ON."""
    return [
        "-F", "none",
        "-i", key,
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "ConnectTimeout=10",
        "-o", "LogLevel=ERROR",
    ]  # fmt: skip


def _node_releases(
    old: LabState | None, plans: list[plan.NodePlan], releases: tuple[str | None, Mapping[str, str]]
) -> dict[str, str]:
    """Each node's release: named, else every node's, else what it runs, else Debian 12."""
    every, named = releases
    before = {n.name: n.os for n in old.nodes} if old else {}
    return {n.name: named.get(n.name) or every or before.get(n.name) or plan.DEFAULT_OS for n in plans}


def _bases(image: str | None, releases: set[str], mirrors: HostMirrors, log: Log) -> dict[str, str]:
    """The base root filesystem of each release in use (a baked ``image`` serves them all)."""
    if image:
        base = image_rootfs(image)
        return {r: base for r in releases}
    return {r: ensure_rootfs(plan.LAB_RELEASES[r], mirrors, log=log) for r in sorted(releases)}


def _new_state(name: str, subnet: str, nodes: int, paths: LabPaths, mode: str, os_of: Mapping[str, str]) -> LabState:
    br_addr = plan.bridge_address(subnet)
    return LabState(
        name=name,
        subnet=subnet,
        bridge=plan.bridge_name(name),
        bridge_address=br_addr,
        nodes=[NodeState(n.name, n.address, os_of[n.name]) for n in plan.node_plan(subnet, nodes)],
        ssh_key=paths.key,
        known_hosts=paths.known_hosts,
        mirror_url=f"http://{br_addr}:{plan.MIRROR_PORT}",
        state_dir=paths.dir,
        rootfs_mode=mode,
    )


def up(
    name: str = plan.DEFAULT_NAME,
    nodes: int = plan.DEFAULT_NODES,
    subnet: str = plan.DEFAULT_SUBNET,
    *,
    boot_timeout: float = BOOT_TIMEOUT,
    log: Log = _stderr,
    shared: Sequence[SharedFolder] | None = None,
    image: str | None = None,
    releases: tuple[str | None, Mapping[str, str]] = (None, {}),
) -> LabState:
    """Bring lab ``name`` to ``nodes`` running nodes: create, repair, grow or shrink as needed.

    A healthy lab of the right size is left alone (no node restarted). ``shared``: the lab's
    stand-in for shared storage (:class:`SharedFolder`); None keeps what the lab has; a node whose
    shared folders change restarts (a bind mount is made when its container starts). ``image``: boot
    from a baked image (a rootfs tarball or an OCI layout, :mod:`gpuforge.lab.image_base`).
    ``releases``: each node's Debian release (:func:`plan.parse_releases`; unnamed nodes keep theirs, new
    ones get Debian 12); a node whose release changes is re-imaged (its name, address and host key stay).
    """
    plan.validate_name(name)
    plan.parse_subnet(subnet, nodes)
    if shared is not None:
        plan.check_shared([(f.name, f.path, f.nodes) for f in shared], nodes)
    require_root()
    require_tools(REQUIRED_TOOLS)
    paths = LabPaths(name)
    hostlimits.ensure_limits(nodes, log)
    with file_lock(paths.lock):
        old = load_state(paths.state_file)
        if old is not None and old.subnet != subnet:
            raise LabError(
                f"lab {name} already exists with subnet {old.subnet}; run `gpuforge lab down --name {name}` first"
            )
        if old is None:
            gone = _teardown(name, paths, keep_console=True)
            if gone:
                log(f"removed stale objects of lab {name}: {', '.join(gone)}")
        mirrors = host_mirrors()
        os_of = _node_releases(old, plan.node_plan(subnet, nodes), releases)
        bases = _bases(image, set(os_of.values()), mirrors, log)
        os.makedirs(paths.dir, mode=0o755, exist_ok=True)
        base = next(iter(bases.values()))
        mode = (
            old.rootfs_mode
            if old and old.rootfs_mode
            else ("overlay" if node.overlay_works(base, paths.dir) else "copy")
        )
        state = _new_state(name, subnet, nodes, paths, mode, os_of)
        state.shared = list(shared) if shared is not None else (old.shared if old else [])
        rebound = _rebound(old.shared if old else [], state.shared, paths)
        client_pub = node.ensure_keypair(paths.key, f"gpuforge-lab-{name}")

        restart_all = _ensure_network(state, paths, mirrors, log)
        _shrink(state, paths, log)
        plans = plan.node_plan(subnet, nodes)
        reimaged = {n.name for n in (old.nodes if old else []) if n.name in os_of and os_of[n.name] != n.os}
        to_start = _prepare_nodes(state, paths, plans, bases, mirrors, client_pub, restart_all, rebound | reimaged)
        save_state(state, paths.state_file)
        t0 = time.monotonic()
        _boot(state, paths, plans, to_start, fresh=old is None, boot_timeout=boot_timeout, log=log)
        if to_start:
            log(f"{len(to_start)} node(s) up in {time.monotonic() - t0:.1f} s")
        return state


def _ensure_network(state: LabState, paths: LabPaths, mirrors: HostMirrors, log: Log) -> bool:
    """The bridge and the site mirror up; True when the bridge was rebuilt (it lost every veth:
    all nodes restart then)."""
    name, subnet = state.name, state.subnet
    restart_all = False
    if not network.bridge_ok(name, subnet):
        node.stop(name)
        network.remove_all(name)
        network.create_bridge(name, subnet)
        restart_all = True
        log(f"bridge {state.bridge} {state.bridge_address}")
    if restart_all or not mirror.mirror_ok(state.bridge_address, paths.mirror_dir):
        mirror.start_mirror(state.bridge_address, mirrors, paths.mirror_cache, paths.mirror_dir)
        log(f"site mirror {state.mirror_url} (apt-cacher-ng)")
    return restart_all


def _binds(state: LabState, paths: LabPaths, node_name: str) -> list[tuple[str, str]]:
    """(host folder, path in the node) of each shared folder ``node_name`` mounts."""
    return [(paths.shared_dir(f.name), f.path) for f in state.shared if node_name in f.nodes]


def _rebound(old: list[SharedFolder], new: list[SharedFolder], paths: LabPaths) -> set[str]:
    """Make each shared folder's host folder; return the nodes whose shared folders changed."""
    for f in new:
        os.makedirs(paths.shared_dir(f.name), mode=0o755, exist_ok=True)
    before = {(f.name, f.path, n) for f in old for n in f.nodes}
    after = {(f.name, f.path, n) for f in new for n in f.nodes}
    return {n for _, _, n in before ^ after}


def _shrink(state: LabState, paths: LabPaths, log: Log) -> None:
    """Nodes beyond the wanted count go away entirely."""
    name = state.name
    wanted = {n.name for n in state.nodes}
    extra = sorted({p for p in _known_nodes(name, paths) if p not in wanted}, key=plan.node_index)
    if extra:
        node.stop(name, extra)
        for x in extra:
            network.remove_node_net(name, x)
            node.release_rootfs(paths, x)
            remove_tree(paths.node_dir(x))
        log(f"removed {', '.join(extra)}")


def _prepare_nodes(
    state: LabState,
    paths: LabPaths,
    plans: list[plan.NodePlan],
    bases: Mapping[str, str],
    mirrors: HostMirrors,
    client_pub: str,
    restart_all: bool,
    rebound: set[str],
) -> list[plan.NodePlan]:
    """Per node: healthy, or stopped and listed to (re)start (``rebound``: its shared folders
    changed); identity written (no-op when unchanged).

    Writes the lab's known_hosts; returns the nodes to start."""
    name, mode = state.name, state.rootfs_mode
    hosts = plan.hosts_file(plans)
    to_start: list[plan.NodePlan] = []
    # One look at the host for every node (a /proc scan costs tens of ms at 48 nodes).
    running = node.running_nodes(name)
    orphaned = {n for n in (node.node_of_init(name, p) for p in node.orphan_inits(name)) if n}
    for n in plans:
        healthy = (
            n.name in running
            and not restart_all
            and network.node_net_ok(name, n.name)
            and (mode == "copy" or paths.node_rootfs(n.name) in mounts_under(paths.node_rootfs(n.name)))
            and n.name not in orphaned
            and n.name not in rebound
        )
        if not healthy:
            if n.name in running or n.name in orphaned:
                node.stop(name, [n.name])
            to_start.append(n)
        release = state.node(n.name).os
        rootfs = node.prepare_rootfs(paths, n.name, bases[release], mode, release)
        suite = plan.LAB_RELEASES[release]
        node.write_identity(paths, n.name, rootfs, hosts, client_pub, mirrors, state.mirror_url, suite)
    keys = [(n, node.host_key(paths, n.name)) for n in plans]
    write_file(paths.known_hosts, plan.known_hosts(keys))
    return to_start


def _boot(
    state: LabState,
    paths: LabPaths,
    plans: list[plan.NodePlan],
    to_start: list[plan.NodePlan],
    *,
    fresh: bool,
    boot_timeout: float,
    log: Log,
) -> None:
    """Start ``to_start`` and wait until every node answers SSH.

    On any failure nothing this call started is left running: a ``fresh`` lab goes entirely, an
    existing one loses only the nodes this call (re)started; the next ``up`` starts them again."""
    name = state.name
    try:
        _start_nodes(paths, state, to_start)
        if to_start:
            log(f"booting {', '.join(n.name for n in to_start)}")
        node.wait_booted(
            paths,
            name,
            [(n.name, n.address) for n in plans],
            ["ssh", *ssh_options(paths.key, paths.known_hosts), "-o", "BatchMode=yes"],
            boot_timeout,
        )
    except BaseException:
        if fresh:
            _teardown(name, paths, keep_console=True)
            log(f"lab {name} did not come up: everything it started was removed")
        else:
            started = [n.name for n in to_start]
            node.stop(name, started)
            for x in started:
                network.remove_node_net(name, x)
            log(f"lab {name}: {', '.join(started) or 'no node'} stopped again; `gpuforge lab up` retries")
        raise


def _start_nodes(paths: LabPaths, state: LabState, nodes: list[plan.NodePlan]) -> None:
    """Network and systemd-nspawn (with the node's shared folders) for each node, several at once
    (each is a few subprocesses), then wait until every nspawn runs."""
    if not nodes:
        return
    name, subnet = state.name, state.subnet
    namespaces, links = set(network.netns_list()), set(network.link_list())

    def one(n: plan.NodePlan) -> None:
        fresh = plan.netns_name(name, n.name) not in namespaces and plan.veth_host(name, n.name) not in links
        netns_path = network.create_node_net(name, subnet, n.name, fresh=fresh)
        node.spawn(paths, name, n.name, paths.node_rootfs(n.name), netns_path, _binds(state, paths, n.name))

    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        list(pool.map(one, nodes))  # re-raises the first failure
    node.wait_spawned(paths, name, [n.name for n in nodes])


def _known_nodes(name: str, paths: LabPaths) -> set[str]:
    """Nodes this lab has anything of: node dirs, containers, namespaces."""
    found: set[str] = set()
    if os.path.isdir(paths.nodes_dir):
        found |= {d for d in os.listdir(paths.nodes_dir) if d.startswith("node")}
    found |= {n for p in node.nspawn_processes(name) if (n := node.node_of(name, p))}
    for ns in plan.owned_netns(name, network.netns_list()):
        found.add(ns.rsplit("-", 1)[1])
    return found


def _teardown(name: str, paths: LabPaths, keep_console: bool) -> list[str]:
    """Remove every process, namespace, link, mount and file of lab ``name``; return what went."""
    gone = [f"container pid {p}" for p in node.stop(name)]
    gone += [f"mirror pid {p}" for p in mirror.stop_mirror(paths.mirror_dir)]
    gone += network.remove_all(name)
    deadline = time.monotonic() + 5  # namespaces die asynchronously once their last process exits
    while plan.owned_links(name, network.link_list()) and time.monotonic() < deadline:
        time.sleep(0.1)
        gone += [g for g in network.remove_all(name) if g not in gone]
    gone += [f"mount {m}" for m in mounts_under(paths.dir)]
    if os.path.isdir(paths.dir):
        for entry in os.listdir(paths.dir):
            if keep_console and entry == "console":
                continue
            p = os.path.join(paths.dir, entry)
            if os.path.isdir(p) and not os.path.islink(p):
                remove_tree(p)
            else:
                os.unlink(p)
            if entry == "lab.json":
                gone.append("state")
    return gone


def down(name: str = plan.DEFAULT_NAME, *, log: Log = _stderr) -> list[str]:
    """Stop and remove lab ``name`` (also what a crashed run left); return what was removed.

    Console logs under ``<state dir>/console`` are kept for debugging; the rootfs and mirror
    caches under ``/var/cache/gpuforge`` are kept too.
    """
    plan.validate_name(name)
    require_root()
    require_tools({k: v for k, v in REQUIRED_TOOLS.items() if k == "ip"})
    paths = LabPaths(name)
    with file_lock(paths.lock):
        gone = _teardown(name, paths, keep_console=True)
    if gone:
        log(f"lab {name} removed ({len(gone)} objects)")
    return gone


def status(name: str = plan.DEFAULT_NAME) -> LabState | None:
    """The saved state of lab ``name``, or ``None`` if it is not up."""
    plan.validate_name(name)
    return load_state(LabPaths(name).state_file)


def node_running(name: str, node_name: str) -> bool:
    """True if the node's container process is alive."""
    return node.nspawn_pid(name, node_name) is not None


def node_pids(name: str) -> dict[str, int]:
    """The systemd-nspawn pid of every running node of lab ``name``."""
    out: dict[str, int] = {}
    for p in node.nspawn_processes(name):
        n = node.node_of(name, p)
        if n:
            out[n] = p.pid
    return out


def ssh_command(state: LabState, node_name: str, command: Sequence[str] | None = None, tty: bool = False) -> list[str]:
    """The ``ssh`` argv that reaches ``node_name`` as root (host-key checking on).

    A one-element ``command`` is a shell command line (``["getent hosts node2 | head -1"]``);
    several elements are an argv, quoted for the remote shell (``["sh", "-c", "echo a b"]``).
    """
    n = state.node(node_name)
    argv = ["ssh", *ssh_options(state.ssh_key, state.known_hosts)]
    argv += ["-t"] if tty else ["-o", "BatchMode=yes"]
    argv += ["--", f"root@{n.address}"]
    if command:
        argv.append(command[0] if len(command) == 1 else shlex.join(command))
    return argv


def ssh(name: str, node_name: str, command: list[str] | None = None) -> int:
    """Open a shell on a node (``command`` None) or run ``command`` there; return its exit status."""
    state = status(name)
    if state is None:
        raise LabError(f"lab {name} is not up; run `gpuforge lab up --name {name}`")
    try:
        state.node(node_name)
    except KeyError as exc:
        raise LabError(str(exc.args[0])) from exc
    if not os.access(state.ssh_key, os.R_OK):
        raise LabError(f"cannot read the lab key {state.ssh_key}: run as root")
    tty = not command and sys.stdin.isatty()
    return subprocess.call(ssh_command(state, node_name, command, tty=tty))
