"""The reimage tests' site: a Slurm spec whose compute nodes cpu1 and cpu2 (127.0.0.21 and .22) boot
over the network and sit behind the sushy-tools emulator's systems 4 and 5, and a real SSH server
(paramiko's) on each node's loopback address that shows one host key until the emulator has logged
a reset of that node's system, and a fresh one after (a node that booted a new image)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko

from tests import yaml_text
from tests.bmc.emulator import Emulator

HARDWARE = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 4000}
MACS = {"cpu1": "0c:c4:7a:00:00:01", "cpu2": "0c:c4:7a:00:00:02"}
ADDRESSES = {"cpu1": "127.0.0.21", "cpu2": "127.0.0.22"}
FIRST_SYSTEM = 4  # the emulator's systems 0-3 are the power and bootdev tests'
# ssh-keyscan asks for every key type; the servers hold one RSA key and paramiko logs each refused type
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)


def system_of(emu: Emulator, node: str) -> str:
    return emu.systems[FIRST_SYSTEM + ["cpu1", "cpu2"].index(node)]


def resets_of(emu: Emulator, system: str) -> int:
    """Reset actions the emulator logged for ``system``."""
    return emu.log.read_text(errors="replace").count(f"/Systems/{system}/Actions/ComputerSystem.Reset")


def write_site(
    folder: Path, emu: Emulator, ssh_port: int, known_hosts: Path, bmc: tuple[str, ...] = ("cpu1", "cpu2"),
    batch_size: int = 1, drain_timeout: int = 30, ipmi_ports: dict[str, int] | None = None,
) -> Path:  # fmt: skip
    """The spec (``bmc``: the nodes with a BMC section, the emulator's unless ``ipmi_ports`` gives the
    node's IPMI BMC port); the credentials file is ``bmc.cred`` beside it."""
    groups: list[dict[str, object]] = [
        {"name": "ctl", "hosts": "ctl1", "addresses": ["127.0.0.10"], "roles": ["controller", "accounting-db"]}
    ]
    for name in ("cpu1", "cpu2"):
        group: dict[str, object] = {
            "name": name, "hosts": name, "addresses": [ADDRESSES[name]], "roles": ["compute"], "hardware": HARDWARE,
            "boot": {"mode": "stateless", "image": "images/cpu", "macs": {name: MACS[name]},
                     "nfs_export": "/srv/gpuforge/cpu"},
        }  # fmt: skip
        if ipmi_ports and name in ipmi_ports:
            group["bmc"] = {"protocol": "ipmi", "addresses": ["127.0.0.1"], "port": ipmi_ports[name],
                            "credentials_file": "bmc.cred"}  # fmt: skip
        elif name in bmc:
            group["bmc"] = {"addresses": ["127.0.0.1"], "port": emu.port, "credentials_file": "bmc.cred",
                            "tls_fingerprint": emu.fingerprint, "system_id": system_of(emu, name)}  # fmt: skip
        groups.append(group)
    data = {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "ssh": {"port": ssh_port, "known_hosts": str(known_hosts)},
        "provisioning": {"server": {"interface": "lo", "address": "127.0.0.1/8", "mode": "proxy"}},
        "node_groups": groups,
        "slurm": {"partitions": [{"name": "batch", "nodes": "cpu1,cpu2"}]},
        "rollout": {"batch_size": batch_size, "drain_timeout": drain_timeout},
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


class _RefuseAll(paramiko.ServerInterface):
    def get_allowed_auths(self, username: str) -> str:
        return "publickey"


class Node:
    """A node's SSH side: its key before the reimage and the one it makes when it boots the image
    (once ``resets()``, the count of power changes its BMC logged, has grown)."""

    def __init__(self, name: str, resets: Callable[[], int]) -> None:
        self.name, self.resets = name, resets
        self.old, self.new = paramiko.RSAKey.generate(2048), paramiko.RSAKey.generate(2048)
        self.resets_before = resets()
        self.answers = True  # False: the node never comes back (nothing listens after its reset)

    @classmethod
    def behind(cls, emu: Emulator, name: str) -> Node:
        """The node behind its emulated Redfish system."""
        system = system_of(emu, name)
        return cls(name, lambda: resets_of(emu, system))

    def key(self) -> paramiko.PKey | None:
        if self.resets() == self.resets_before:
            return self.old
        return self.new if self.answers else None

    def known_hosts_line(self, port: int) -> str:
        return f"[{ADDRESSES[self.name]}]:{port} {self.old.get_name()} {self.old.get_base64()}\n"


def _handle(node: Node, conn: socket.socket, transports: list[paramiko.Transport]) -> None:
    key = node.key()
    if key is None:
        conn.close()
        return
    tr = paramiko.Transport(conn)
    tr.add_server_key(key)
    transports.append(tr)
    try:
        tr.start_server(server=_RefuseAll())
    except (paramiko.SSHException, EOFError, OSError):
        tr.close()


@contextmanager
def ssh_nodes(nodes: list[Node]) -> Iterator[int]:
    """Each node's SSH server on its own loopback address, all on one port (yielded)."""
    stop = threading.Event()
    sockets: list[tuple[Node, socket.socket]] = []
    transports: list[paramiko.Transport] = []
    port = 0
    for node in nodes:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((ADDRESSES[node.name], port))
        port = srv.getsockname()[1]
        srv.listen(16)
        srv.settimeout(0.2)
        sockets.append((node, srv))

    def serve(node: Node, srv: socket.socket) -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            _handle(node, conn, transports)

    threads = [threading.Thread(target=serve, args=pair, daemon=True) for pair in sockets]
    for t in threads:
        t.start()
    try:
        yield port
    finally:
        stop.set()
        for t in threads:
            t.join()
        for _, srv in sockets:
            srv.close()
        for tr in transports:
            tr.close()
