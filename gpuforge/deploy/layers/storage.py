"""Shared storage: the NFS server on the ``storage`` node, NFS mount units on the nodes that mount.

Runs on every node (before munge and Slurm, so that a Slurm state directory on shared storage is
mounted before slurmctld starts); a node with no export and no nfs mount gets an empty layer.

- storage node: the platform's NFS server packages, each export's directory, the export table
  (``render.storage``), ``nfs-server`` enabled and running, ``exportfs -ra`` when the table changes;
- a node with nfs mounts: the platform's NFS client packages and one mount unit per mount, enabled
  (``WantedBy=remote-fs.target``) and started; a changed unit remounts (``systemctl restart``);
- every node: gpuforge's mount units whose mount left the spec are unmounted and removed
  (``deploy.storage_removal``: only units carrying gpuforge's mark, never the data).

``external`` mounts are the site's: nothing is written for them (``gpuforge validate`` checks them).
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, run_state, spec
from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Service, Step
from gpuforge.deploy.operations.layer import converge
from gpuforge.deploy.runstate import RunState
from gpuforge.deploy.storage_removal import OWNED_READ, parse_owned, removal_steps
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


def mount_layer(s: Spec, n: Node, run: RunState | None = None) -> Layer:
    """The node's NFS mount units, enabled and mounted, and the removal of gpuforge's units whose
    mount left the spec (``run``: whether this run holds the node drained, or only plans)."""
    mounts = [m for m in mounts_of(s, n.name) if m.kind is MountKind.NFS]
    units = {unit_path(m) for m in mounts}
    wanted = {unit_name(m.path) for m in mounts}
    drained = run is not None and n.name in run.drained
    dry_run = run is not None and run.dry_run
    runs_jobs = n.has(Role.COMPUTE) or n.has(Role.K8S_WORKER)

    def remove(facts: LayerFacts, changed: set[str]) -> list[Step]:
        owned = parse_owned(facts.contents.get(OWNED_READ))
        return removal_steps(owned, wanted, n.name, runs_jobs, drained, dry_run)

    return Layer(
        "storage-mounts",
        packages=n.platform.distribution.nfs_client_packages if mounts else (),
        files=[f for f in storage_files(s, n) if f.path in units],
        services=tuple(Service(unit_name(m.path), restart_on=(unit_path(m),)) for m in mounts),
        read_paths=(OWNED_READ,),
        after=remove,
        rpm=not n.os.is_deb,
    )


@deploy("gpuforge storage")
def storage() -> None:
    # Two operations: pyinfra runs each on every host before the next, so the server exports before
    # any node mounts.
    s, n = spec(), node()
    converge(name="storage: NFS server", layer=server_layer(s, n))
    converge(name="storage: NFS mounts", layer=mount_layer(s, n, run_state()))
