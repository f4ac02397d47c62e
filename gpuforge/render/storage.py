"""Shared storage files: the storage node's NFS exports and each node's systemd mount units.

- ``/etc/exports.d/gpuforge.exports`` on the node with role ``storage`` (exports(5): extra export
  tables end in ``.exports``; ``exportfs -ra`` applies them). Each export is offered to the nodes that
  mount it, by name (they resolve through gpuforge's /etc/hosts); an export no node mounts is left out
  (a line without clients would be refused, or offered to every host).
- ``/etc/systemd/system/<escaped mount point>.mount`` on every node of an nfs mount: ``nofail`` (the
  boot goes on without the server) and ``TimeoutSec`` (a dead server cannot hang the mount), never an
  /etc/fstab line that a typo could turn into an unbootable node. ``external`` mounts get no file.

Escaping: paths are plain by the spec's type (``SlurmPath``); the exports writer still writes any other
character as exports(5)'s backslash-octal, the unit writer through systemd's own escaping, and each
unit's name follows systemd.unit(5)'s path escaping (``unit_name``).

Ownership: a unit gpuforge wrote starts with the managed-file header and has a ``Description=``
starting with :data:`OWNED_DESCRIPTION` (both in every unit gpuforge has ever written for a mount).
Only such units are removed when their mount leaves the spec (``deploy.layers.storage``); a site's
own mount unit, without them, is never touched.
"""

from __future__ import annotations

import re

from gpuforge.render.escape import _one_line
from gpuforge.render.files import RenderedFile, Secrets, header
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.storage import Mount, MountKind
from gpuforge.spec.storage_rules import mount_nodes, mounts_of, nfs_source

EXPORTS_FILE = "/etc/exports.d/gpuforge.exports"
UNIT_DIR = "/etc/systemd/system"
NFS_SERVER_UNIT = "nfs-server"
_UNIT_PLAIN = re.compile(r"[A-Za-z0-9:_.]")
_EXPORT_PLAIN = re.compile(r"[A-Za-z0-9._/+-]")
#: The start of the ``Description=`` of every mount unit gpuforge writes (with the header: its mark).
OWNED_DESCRIPTION = "gpuforge storage.mounts "


def unit_name(path: str, suffix: str = "mount") -> str:
    """systemd.unit(5)'s escaping of an absolute path into a unit name: ``/home/lennart`` ->
    ``home-lennart.mount``; ``/`` -> ``-.mount``; other characters as ``\\xNN``."""
    if not path.startswith("/"):
        raise ValueError(f"{path!r} is not an absolute path")
    parts = [p for p in path.split("/") if p]
    if not parts:
        return f"-.{suffix}"
    text = "/".join(parts)
    out = []
    for i, ch in enumerate(text):
        if ch == "/":
            out.append("-")
        elif _UNIT_PLAIN.fullmatch(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out) + f".{suffix}"


def exports_path(path: str) -> str:
    """An export path as exports(5) reads it: plain characters as they are, others as ``\\ooo``."""
    return "".join(ch if _EXPORT_PLAIN.fullmatch(ch) else "".join(f"\\{b:03o}" for b in ch.encode()) for ch in path)


def exports_text(spec: Spec) -> str:
    """The storage node's export table: one line per export some node mounts."""
    lines = [header().rstrip("\n")]
    for export in spec.storage.exports:
        clients = sorted(
            {n for m in spec.storage.mounts if m.export == export.name for n in mount_nodes(spec, m)},
        )
        if not clients:
            lines.append(f"# {export.name}: no node mounts it, not exported")
            continue
        opts = ",".join(export.options)
        lines.append(exports_path(export.path) + " " + " ".join(f"{c}({opts})" for c in clients))
    return "\n".join(lines) + "\n"


def mount_options(mount: Mount) -> str:
    """The unit's ``Options=``: rw/ro, the spec's options, and nofail (always)."""
    return ",".join(["rw" if mount.writable else "ro", *mount.options, "nofail"])


def mount_unit(spec: Spec, mount: Mount) -> str:
    """One NFS mount unit (systemd.mount(5)); network mounts order after the network by themselves."""
    source = nfs_source(spec, mount)
    if source is None:
        raise ValueError(f"mount {mount.name!r} has no NFS source (external, or the spec was not checked)")
    return (
        header()
        + "[Unit]\n"
        + f"Description={OWNED_DESCRIPTION}{mount.name}: {source}\n"
        + "[Mount]\n"
        + f"What={unit_value(source)}\n"
        + f"Where={unit_value(mount.path)}\n"
        + "Type=nfs\n"
        + f"Options={mount_options(mount)}\n"
        + f"TimeoutSec={mount.timeout_s}\n"
        + "[Install]\n"
        + "WantedBy=remote-fs.target\n"
    )


def unit_value(value: str) -> str:
    """A literal unit-file value (``What=``, ``Where=``): one line, ``%`` doubled (specifiers); no
    quoting, which these settings would keep as part of the value."""
    return _one_line(value, "a systemd unit setting").replace("%", "%%")


def unit_path(mount: Mount) -> str:
    return f"{UNIT_DIR}/{unit_name(mount.path)}"


def storage_files(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[RenderedFile]:
    """The exports table (storage node) and the node's NFS mount units."""
    files = []
    if node.has(Role.STORAGE) and spec.storage.exports:
        files.append(RenderedFile(EXPORTS_FILE, exports_text(spec)))
    for mount in mounts_of(spec, node.name):
        if mount.kind is MountKind.NFS:
            files.append(RenderedFile(unit_path(mount), mount_unit(spec, mount)))
    return files


def node_units(spec: Spec, names: set[str] | None = None) -> dict[str, dict[str, tuple[str, str]]]:
    """Per node: {mount name: (unit path, unit text)} of the nfs mounts gpuforge writes there
    (``names``: these mounts only). ``external`` mounts write nothing, so they are not listed."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for mount in spec.storage.mounts:
        if mount.kind is not MountKind.NFS or (names is not None and mount.name not in names):
            continue
        unit = (unit_path(mount), mount_unit(spec, mount))
        for name in mount_nodes(spec, mount):
            out.setdefault(name, {})[mount.name] = unit
    return out
