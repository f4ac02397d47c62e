"""Shared storage: the NFS server on the ``storage`` node, NFS mount units on the nodes that mount.

Runs on every node (before munge and Slurm, so that a Slurm state directory on shared storage is
mounted before slurmctld starts); a node with no export and no nfs mount gets an empty layer.

- storage node: the platform's NFS server packages, each export's directory, the export table
  (``render.storage``), ``nfs-server`` enabled and running, ``exportfs -ra`` when the table changes;
- a node with nfs mounts: the platform's NFS client packages and one mount unit per mount, enabled
  (``WantedBy=remote-fs.target``) and started; a changed unit remounts (``systemctl restart``).

``external`` mounts are the site's: nothing is written for them (``gpuforge validate`` checks them).
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Directory, Layer, Service
from gpuforge.deploy.operations.layer import converge
from gpuforge.render.storage import EXPORTS_FILE, NFS_SERVER_UNIT, storage_files, unit_name, unit_path
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.storage import MountKind
from gpuforge.spec.storage_rules import mounts_of


def server_layer(s: Spec, n: Node) -> Layer:
    """The NFS server of the ``storage`` node (empty elsewhere)."""
    if not (n.has(Role.STORAGE) and s.storage.exports):
        return Layer.empty("storage-server")
    exports = [f for f in storage_files(s, n) if f.path == EXPORTS_FILE]
    dirs = [Directory("/etc/exports.d", "0755")] + [Directory(e.path, "0755") for e in s.storage.exports]
    return Layer(
        "storage-server",
        packages=n.platform.distribution.nfs_server_packages,
        directories=tuple(dirs),
        files=exports,
        services=(Service(NFS_SERVER_UNIT, reload_on=(EXPORTS_FILE,), reload_command="exportfs -ra"),),
        rpm=not n.os.is_deb,
    )


def mount_layer(s: Spec, n: Node) -> Layer:
    """The node's NFS mount units, enabled and mounted (empty when it has none)."""
    mounts = [m for m in mounts_of(s, n.name) if m.kind is MountKind.NFS]
    if not mounts:
        return Layer.empty("storage-mounts")
    units = {unit_path(m) for m in mounts}
    return Layer(
        "storage-mounts",
        packages=n.platform.distribution.nfs_client_packages,
        files=[f for f in storage_files(s, n) if f.path in units],
        services=tuple(Service(unit_name(m.path), restart_on=(unit_path(m),)) for m in mounts),
        rpm=not n.os.is_deb,
    )


@deploy("gpuforge storage")
def storage() -> None:
    # Two operations: pyinfra runs each on every host before the next, so the server exports before
    # any node mounts.
    s, n = spec(), node()
    converge(name="storage: NFS server", layer=server_layer(s, n))
    converge(name="storage: NFS mounts", layer=mount_layer(s, n))
