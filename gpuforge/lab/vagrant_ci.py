"""Vagrant VMs for CI on one machine: libvirt, its VM networks and vagrant inside a network namespace.

Used by the Vagrant test (and by anyone who wants the same on a machine without KVM):

    with vagrant_lab(workdir, build_box()) as vl:
        vl.vagrant("up", "--provider=libvirt")
        vl.run([gpuforge, "apply", "--yes", spec])

Invariants:
- Every packet stays on this machine: libvirtd, the VM networks (libvirt's bridges, dnsmasq) and
  every command that talks to the VMs run in the namespace ``gf-vagrant``, which has no link to
  the root namespace. The VMs reach Debian's packages only through a site mirror (apt-cacher-ng on
  the root namespace's loopback), relayed into the namespace over a Unix socket by two socat
  processes; it listens there on port 3142 of every address (the VM networks' host side).
- libvirt's objects are transient or removed: the storage pool is made with ``pool-create-as``,
  networks vagrant-libvirt defines are destroyed and undefined, and on the way out everything this
  module started is stopped (VMs, libvirtd, virtlogd, dnsmasq, socat, the mirror) and the namespace
  deleted, also after a failure. What a killed run left (libvirtd restores an active pool from its
  state file) is cleared right after the next run's libvirtd starts.
- A libvirtd that already runs (a workstation's, in the root namespace) is never used nor stopped:
  the lab refuses to start beside it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from .mirror import start_mirror, stop_mirror
from .sources import host_mirrors
from .system import LabError, processes, remove_tree, require_root, require_tools, run, spawn_detached, stop_processes
from .vagrant_box import Box

NETNS = "gf-vagrant"
POOL = "gpuforge-vagrant"
MIRROR_ADDRESS = "127.0.0.1"
MIRROR_PORT = 3142
MIRROR_CACHE = "/var/cache/gpuforge/acng/vagrant"
LIBVIRT_SOCKET = "/run/libvirt/libvirt-sock"
# The VM disks: a path qemu (user libvirt-qemu) can reach, unlike a private temporary folder.
POOL_DIR = "/var/lib/gpuforge/vagrant-pool"
TOOLS: dict[str, str] = {
    "vagrant": "vagrant",
    "libvirtd": "libvirt-daemon-system",
    "virtlogd": "libvirt-daemon-system",
    "virsh": "libvirt-clients",
    "qemu-system-x86_64": "qemu-system-x86",
    "dnsmasq": "dnsmasq-base",
    "socat": "socat",
    "ssh-keyscan": "openssh-client",
}
_DAEMONS = ("libvirtd", "virtlogd")


@dataclass
class VagrantLab:
    """A running Vagrant environment in ``workdir`` (its Vagrantfile), reachable only inside ``netns``."""

    workdir: str
    box: Box
    nodes: int = 1
    netns: str = NETNS
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, argv: Sequence[str], timeout: float = 900, log: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the namespace, in ``workdir``, with the Vagrant environment plus ``env``
        (output captured, or appended to ``log``)."""
        full = ["ip", "netns", "exec", self.netns, *argv]
        env = {**os.environ, **self.env, **(env or {})}
        if log is None:
            return subprocess.run(full, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=timeout)
        with open(log, "a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            rc = subprocess.run(full, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        return subprocess.CompletedProcess(full, rc.returncode, "", "")

    def vagrant(self, *args: str, timeout: float = 900) -> None:
        """``vagrant ARGS`` (output appended to ``vagrant.log`` in workdir); LabError on failure, with
        what libvirt says of the VMs then (their states, addresses and the DHCP leases it handed out)."""
        log = os.path.join(self.workdir, "vagrant.log")
        if self.run(["vagrant", *args], timeout=timeout, log=log).returncode != 0:
            raise LabError(f"vagrant {' '.join(args)} failed; see {log}\n{self.libvirt_view()}")

    def add_box(self, box: Box) -> None:
        """``vagrant box add`` under ``box.name`` (replacing a box of that name)."""
        self.vagrant("box", "add", "--force", "--name", box.name, box.box_file, timeout=600)

    def libvirt_view(self) -> str:
        """Each domain's state and interface addresses, and every network's DHCP leases (for a VM that
        never showed an address: did it get a lease at all, or did vagrant-libvirt give up waiting?)."""
        lines = []
        domains = _virsh(self.netns, "list", "--all", "--name", check=False).stdout.split()
        for dom in domains:
            state = _virsh(self.netns, "domstate", dom, check=False).stdout.strip()
            addrs = _virsh(self.netns, "domifaddr", dom, check=False).stdout.strip()
            lines.append(f"libvirt domain {dom}: {state or 'state unknown'}\n{addrs}")
        for net in _virsh(self.netns, "net-list", "--name", check=False).stdout.split():
            leases = _virsh(self.netns, "net-dhcp-leases", net, check=False).stdout.strip()
            lines.append(f"libvirt network {net} DHCP leases:\n{leases}")
        return "\n".join(lines) or "libvirt lists no domain"

    def pin_host_keys(self, hosts: Sequence[str], known_hosts: str) -> None:
        """Write ``known_hosts`` with each VM's host keys, read over the namespace's private network.

        Trust on first use, on a network only this namespace has; every later connection checks them.
        """
        lines: list[str] = []
        for host in hosts:
            cp = self.run(["ssh-keyscan", "-T", "10", "-t", "ed25519", host], timeout=60)
            found = [ln for ln in cp.stdout.splitlines() if ln and not ln.startswith("#")]
            if not found:
                raise LabError(f"ssh-keyscan {host}: no host key ({cp.stderr.strip()[:200]})")
            lines += found
        with open(known_hosts, "w") as f:
            f.write("\n".join(lines) + "\n")


def _virsh(netns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", "netns", "exec", netns, "virsh", "-c", "qemu:///system", *args], check=check, timeout=120)


def _ours(names: Sequence[str], netns: str) -> list[int]:
    """Pids of processes named ``names`` whose network namespace is ``netns``'s."""
    want = netns_inode(netns)
    if want is None:
        return []
    pids: list[int] = []
    for p in processes(lambda argv: os.path.basename(argv[0]) in names):
        try:
            if os.stat(f"/proc/{p.pid}/ns/net").st_ino == want:
                pids.append(p.pid)
        except OSError:
            continue
    return pids


def netns_inode(netns: str = NETNS) -> int | None:
    """Inode of the namespace (processes in it share it), None when there is none."""
    try:
        return os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return None


def leftovers(inode: int | None, netns: str = NETNS) -> list[str]:
    """What of a Vagrant lab is still here: its namespace, and any process still in it (by ``inode``)."""
    found = [f"netns {netns}"] if os.path.exists(f"/run/netns/{netns}") else []
    if inode is not None:
        for p in processes(lambda argv: True):
            try:
                if os.stat(f"/proc/{p.pid}/ns/net").st_ino == inode:
                    found.append(f"process {p.pid} {' '.join(p.argv)[:80]}")
            except OSError:
                continue
    return found


def _start_libvirt(netns: str, log_dir: str, timeout: float = 30) -> None:
    running = processes(lambda argv: os.path.basename(argv[0]) in _DAEMONS)
    if running:
        pids = ", ".join(str(p.pid) for p in running)
        raise LabError(
            f"libvirtd/virtlogd already run on this machine (pid {pids}); the Vagrant lab runs its own inside "
            f"network namespace {netns} and will not share nor stop them: stop them for this run "
            "(systemctl stop libvirtd.service libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket "
            "virtlogd.service virtlogd.socket virtlogd-admin.socket) and start them again after"
        )
    for daemon in ("virtlogd", "libvirtd"):
        spawn_detached(["ip", "netns", "exec", netns, daemon], os.path.join(log_dir, f"{daemon}.log"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(LIBVIRT_SOCKET) and _virsh(netns, "list", check=False).returncode == 0:
            return
        time.sleep(0.3)
    raise LabError(f"libvirtd did not answer within {timeout:g} s; see {log_dir}/libvirtd.log")


def clear_libvirt_objects(netns: str = NETNS) -> list[str]:
    """Destroy what the namespace's libvirtd holds of a lab: every domain, every network (the
    ones vagrant-libvirt defined also undefined; Debian's ``default`` stays defined) and the pool.

    Run on the way out, and right after libvirtd starts: a run killed before its teardown leaves
    the pool's state file under /run/libvirt/storage, and the next libvirtd restores the pool from
    it (``pool-create-as`` then fails with "already exists"). Returns what it found, for the log.
    """
    found: list[str] = []
    for dom in _virsh(netns, "list", "--all", "--name", check=False).stdout.split():
        found.append(f"domain {dom}")
        _virsh(netns, "destroy", dom, check=False)
        _virsh(netns, "undefine", dom, "--nvram", check=False)
    for net in _virsh(netns, "net-list", "--all", "--name", check=False).stdout.split():
        _virsh(netns, "net-destroy", net, check=False)
        if net != "default":  # Debian's own definition stays defined
            found.append(f"network {net}")
            _virsh(netns, "net-undefine", net, check=False)
    if _virsh(netns, "pool-info", POOL, check=False).returncode == 0:
        found.append(f"pool {POOL}")
        _virsh(netns, "pool-destroy", POOL, check=False)
        _virsh(netns, "pool-undefine", POOL, check=False)  # a transient pool has no definition: a no-op
    return found


def _start_relays(netns: str, socket_path: str, log_dir: str) -> None:
    """Port 3142 in the namespace -> Unix socket -> the mirror on the root namespace's loopback."""
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    spawn_detached(
        ["socat", f"UNIX-LISTEN:{socket_path},fork,mode=600", f"TCP:{MIRROR_ADDRESS}:{MIRROR_PORT}"],
        os.path.join(log_dir, "relay-host.log"),
    )
    listen, connect = f"TCP-LISTEN:{MIRROR_PORT},fork,reuseaddr", f"UNIX-CONNECT:{socket_path}"
    spawn_detached(
        ["ip", "netns", "exec", netns, "socat", listen, connect],
        os.path.join(log_dir, "relay-netns.log"),
    )


def _teardown(vl: VagrantLab, pool_dir: str, mirror_dir: str, socket_path: str) -> None:
    netns = vl.netns
    if os.path.exists(f"/run/netns/{netns}"):
        if os.path.isdir(os.path.join(vl.workdir, ".vagrant", "machines")):
            with contextlib.suppress(LabError, subprocess.TimeoutExpired):  # the domains go with virsh below
                vl.vagrant("destroy", "-f", timeout=300)
        if _ours(("libvirtd",), netns):
            clear_libvirt_objects(netns)
        stop_processes(_ours(("qemu-system-x86_64",), netns), timeout=20)
        stop_processes(_ours(("libvirtd", "virtlogd", "socat", "dnsmasq"), netns), timeout=20)
    stop_processes(
        [p.pid for p in processes(lambda argv: os.path.basename(argv[0]) == "socat" and socket_path in " ".join(argv))],
        timeout=10,
    )
    stop_mirror(mirror_dir)
    if os.path.exists(f"/run/netns/{netns}"):
        run(["ip", "netns", "del", netns], check=False)
    for path in (pool_dir, os.path.join(vl.workdir, "vagrant.d")):
        remove_tree(path)
    if os.path.exists(socket_path):
        os.unlink(socket_path)


@contextmanager
def vagrant_lab(
    workdir: str,
    box: Box,
    nodes: int = 1,
    driver: str = "qemu",
    log: Callable[[str], None] = lambda _m: None,
    node_boxes: dict[int, Box] | None = None,
) -> Iterator[VagrantLab]:
    """libvirtd + a site mirror in namespace ``gf-vagrant``, the box added under ``box.name``; all gone after.

    ``workdir`` holds the Vagrantfile; VAGRANT_HOME is ``workdir/vagrant.d`` (the boxes are added there).
    ``node_boxes``: node number -> its own box (the Vagrantfile's ``GPUFORGE_VAGRANT_BOX_NODE<i>``).
    """
    node_boxes = node_boxes or {}
    require_root()
    require_tools(TOOLS)
    if not shutil.which("vagrant") or not os.path.exists("/usr/sbin/libvirtd"):
        raise LabError("vagrant or libvirtd missing: run scripts/setup.sh")
    state = os.path.join(workdir, ".gpuforge-vagrant")
    pool_dir, mirror_dir = POOL_DIR, os.path.join(state, "mirror")
    socket_path = os.path.join(state, "mirror.sock")
    os.makedirs(mirror_dir, exist_ok=True)
    vl = VagrantLab(
        workdir,
        box,
        nodes,
        env={
            "VAGRANT_HOME": os.path.join(workdir, "vagrant.d"),
            "VAGRANT_CHECKPOINT_DISABLE": "1",
            "VAGRANT_DEFAULT_PROVIDER": "libvirt",
            "GPUFORGE_NODES": str(nodes),
            "GPUFORGE_VAGRANT_BOX": box.name,
            "GPUFORGE_LIBVIRT_DRIVER": driver,
            "GPUFORGE_LIBVIRT_POOL": POOL,
            **{f"GPUFORGE_VAGRANT_BOX_NODE{i}": b.name for i, b in node_boxes.items()},
        },
    )
    _teardown(vl, pool_dir, mirror_dir, socket_path)  # a killed earlier run's namespace and daemons
    os.makedirs(pool_dir, mode=0o711, exist_ok=True)
    os.chmod(os.path.dirname(pool_dir), 0o755)
    try:
        run(["ip", "netns", "add", vl.netns])
        run(["ip", "-n", vl.netns, "link", "set", "lo", "up"])
        _start_libvirt(vl.netns, state)
        restored = clear_libvirt_objects(vl.netns)  # what libvirtd restored of a killed earlier run
        if restored:
            log(f"vagrant lab: cleared what an interrupted earlier run left in libvirt: {', '.join(restored)}")
        _virsh(vl.netns, "pool-create-as", POOL, "dir", "--target", pool_dir)
        start_mirror(MIRROR_ADDRESS, host_mirrors(), MIRROR_CACHE, mirror_dir)
        _start_relays(vl.netns, socket_path, state)
        for added in (box, *node_boxes.values()):
            vl.add_box(added)
        yield vl
    finally:
        _teardown(vl, pool_dir, mirror_dir, socket_path)
