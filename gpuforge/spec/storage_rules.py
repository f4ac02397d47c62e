"""Which nodes mount what, and the cross-field rules of ``storage`` and Slurm's shared state.

Rules (each a :class:`SpecIssue` naming its field; ``gpuforge check`` exits 2 on any):

- a mount is ``nfs`` from exactly one of ``export`` or ``server`` + ``remote_path``, or ``external``
  with neither; an ``export`` names an entry of ``storage.exports``;
- exports need exactly one node with role ``storage``; a ``storage`` node needs exports;
- a mount's ``nodes`` name node groups or hosts of the spec; no node mounts two things on one path;
- no mount or export is a system directory or lies below one (``/``, ``/etc``, ``/usr``, ...);
- with two controllers, ``slurm.state_save_location`` lies on a writable mount both controllers
  mount (slurm.conf(5): "readable and writable by both").
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec import hostlist
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.slurm_ha import path_within
from gpuforge.spec.storage import Mount, MountKind, NfsExport

#: Directories a mount or export must never be (or lie below: /proc/x, /etc/x). ``/var`` itself is
#: refused, its subdirectories (/var/lib/slurm/...) are not.
SYSTEM_TREES = ("/boot", "/dev", "/etc", "/proc", "/run", "/sys", "/usr", "/bin", "/sbin", "/lib", "/lib64")
SYSTEM_DIRS = ("/var", "/var/lib", "/tmp", "/root", "/opt", "/srv", "/mnt")


def selector_nodes(spec: Spec, selector: str) -> tuple[list[str], list[str]]:
    """(nodes ``selector`` names, in spec order; parts that name none): group names and hostlists."""
    groups = {g.name: g.hostnames for g in spec.node_groups}
    known = [n for g in spec.node_groups for n in g.hostnames]
    wanted: set[str] = set()
    unknown: list[str] = []
    for part in hostlist.split_top_level(selector):
        if part in groups:
            wanted.update(groups[part])
            continue
        try:
            names = hostlist.expand(part)
        except hostlist.HostlistError:
            unknown.append(part)
            continue
        missing = [n for n in names if n not in known]
        if missing:
            unknown.append(hostlist.compress(missing))
        wanted.update(n for n in names if n in known)
    return [n for n in known if n in wanted], unknown


def mount_nodes(spec: Spec, mount: Mount) -> list[str]:
    """The nodes that mount ``mount``."""
    return selector_nodes(spec, mount.nodes)[0]


def mounts_of(spec: Spec, node: str) -> list[Mount]:
    """The mounts on ``node``, in spec order."""
    return [m for m in spec.storage.mounts if node in mount_nodes(spec, m)]


def storage_server(spec: Spec) -> str | None:
    """The node with role ``storage`` (the rules allow one), or None."""
    names = [n for g in spec.node_groups if Role.STORAGE in g.roles for n in g.hostnames]
    return names[0] if names else None


def export_named(spec: Spec, name: str | None) -> NfsExport | None:
    return next((e for e in spec.storage.exports if e.name == name), None)


def nfs_source(spec: Spec, mount: Mount) -> str | None:
    """``server:/path`` an nfs mount mounts (None: external, or the spec is not sound)."""
    if mount.kind is not MountKind.NFS:
        return None
    if mount.export is not None:
        export, server = export_named(spec, mount.export), storage_server(spec)
        return f"{server}:{export.path}" if export is not None and server is not None else None
    if mount.server is not None and mount.remote_path is not None:
        host = f"[{mount.server}]" if ":" in mount.server else mount.server
        return f"{host}:{mount.remote_path}"
    return None


def _system_path(path: str) -> bool:
    return path == "/" or path in SYSTEM_DIRS or any(path_within(path, t) for t in SYSTEM_TREES)


def _mount_issues(spec: Spec, i: int, m: Mount) -> Iterator[SpecIssue]:
    loc = ("storage", "mounts", i)
    if m.kind is MountKind.NFS:
        by_export, by_server = m.export is not None, m.server is not None or m.remote_path is not None
        if by_export == by_server:
            yield SpecIssue((*loc, "export"), f"nfs mount {m.name!r}: give export, or server and remote_path")
        elif by_server and (m.server is None or m.remote_path is None):
            yield SpecIssue((*loc, "server"), f"nfs mount {m.name!r}: server and remote_path go together")
        elif by_export and export_named(spec, m.export) is None:
            known = ", ".join(e.name for e in spec.storage.exports) or "none defined"
            yield SpecIssue((*loc, "export"), f"export {m.export!r} is not in storage.exports ({known})")
    elif m.export is not None or m.server is not None or m.remote_path is not None:
        yield SpecIssue((*loc, "kind"), f"external mount {m.name!r} is mounted by the site: no export or server")
    if _system_path(m.path):
        yield SpecIssue((*loc, "path"), f"{m.path} is a system directory: mount shared storage elsewhere")
    _, unknown = selector_nodes(spec, m.nodes)
    for part in unknown:
        yield SpecIssue((*loc, "nodes"), f"{part} is not a node or node group of this spec")


def storage_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Exports served, mounts sound, no two mounts on one path of a node."""
    st = spec.storage
    servers = [n for g in spec.node_groups if Role.STORAGE in g.roles for n in g.hostnames]
    if st.exports and len(servers) != 1:
        yield SpecIssue(
            ("storage", "exports"),
            f"NFS exports need exactly one node with role storage; found {len(servers)}"
            + (f": {hostlist.compress(servers)}" if servers else ""),
        )
    if servers and not st.exports:
        yield SpecIssue(("storage", "exports"), f"{servers[0]} has role storage but storage.exports is empty")
    for i, e in enumerate(st.exports):
        if _system_path(e.path):
            yield SpecIssue(("storage", "exports", i, "path"), f"{e.path} is a system directory: export another")
    for i, m in enumerate(st.mounts):
        yield from _mount_issues(spec, i, m)
    taken: dict[tuple[str, str], str] = {}
    for i, m in enumerate(st.mounts):
        for node in mount_nodes(spec, m):
            other = taken.setdefault((node, m.path), m.name)
            if other != m.name:
                yield SpecIssue(
                    ("storage", "mounts", i, "path"), f"{node} already mounts {other!r} on {m.path}", node=node
                )
                break


def shared_state_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Two controllers: StateSaveLocation on a writable mount both mount."""
    if spec.slurm is None:
        return
    controllers = [n for g in spec.node_groups if Role.CONTROLLER in g.roles for n in g.hostnames]
    if len(controllers) != 2:
        return
    state = spec.slurm.state_save_location
    for m in spec.storage.mounts:
        if path_within(state, m.path) and m.writable and set(controllers) <= set(mount_nodes(spec, m)):
            return
    yield SpecIssue(
        ("slurm", "state_save_location"),
        f"two controllers ({', '.join(controllers)}) share Slurm's state: {state} must lie on a writable "
        "storage.mounts entry that both mount (slurm.conf(5): StateSaveLocation 'readable and writable by "
        "both'); otherwise the backup takes over with no jobs. Declare the shared mount (nfs, or external for "
        "one the site mounts) and set slurm.state_save_location below it",
    )
