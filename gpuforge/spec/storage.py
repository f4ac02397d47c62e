"""Shared storage in the spec: NFS exports a ``storage`` node serves, and mounts per node group.

A mount is one of:

- ``nfs`` from an export of this spec (``export:``, served by the one node with role ``storage``), or
  from an existing server (``server:`` and ``remote_path:``); gpuforge writes a systemd mount unit
  (``nofail``, a mount timeout; never /etc/fstab) on every node the mount's ``nodes`` select;
- ``external``: a shared filesystem the site mounts itself (Lustre, GPFS, a VM host's folder, the
  container lab's bind mount): gpuforge writes nothing for it and only checks it (``validate``).

Every mount is checked by ``gpuforge validate`` (``storage.mounts``): mounted, writable or read-only as
declared, and the same filesystem on every node (a file one node writes is read on the others).

Cross-field rules (names unique, exports served, no mount over a system directory, Slurm's state
directory on a mount both controllers share) are in ``gpuforge.spec.storage_rules``.

Invariant: every path is a :data:`gpuforge.spec.slurm_ha.SlurmPath` (plain components), every option
one token of letters, digits and ``_ . - = : +`` (no ``,``: options are comma-joined in the exports
file and the unit's ``Options=``; no space, quote, ``#``, ``%`` or ``$``).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, field_validator

from gpuforge.spec.citation import Citation
from gpuforge.spec.policy import live, rolling
from gpuforge.spec.slurm_ha import SlurmPath
from gpuforge.spec.strict import Name, StrictModel
from gpuforge.spec.types import HostOrIp, NodeSelector

_OPTION = re.compile(r"[a-z][a-z0-9_.-]{0,40}(=[A-Za-z0-9_.:+-]{1,200})?")

SOURCES: dict[str, Citation] = {
    "exports-format": Citation(
        "exports(5), nfs-utils utils/exportfs/exports.man",
        "github.com/deepin-community/nfs-utils utils/exportfs/exports.man (Debian's nfs-utils 2.x source) ; "
        "https://man7.org/linux/man-pages/man5/exports.5.html",
        "'Each line contains an export point and a whitespace-separated list of clients allowed to mount the "
        "file system at that point. Each listed client may be immediately followed by a parenthesized, "
        "comma-separated list of export options for that client. No whitespace is permitted between a client "
        "and its option list.' 'A pound sign (\"#\") introduces a comment' 'If an export name contains spaces "
        "it should be quoted using double quotes. You can also specify spaces or other unusual character in "
        "the export name using a backslash followed by the character code as three octal digits.' 'To apply "
        "changes to this file, run exportfs -ra'. Extra Export Tables: 'exportfs reads files in the "
        "/etc/exports.d directory as extra export tables. Only files ending in .exports are considered.'",
    ),
    "exports-root-squash": Citation(
        "exports(5), User ID Mapping",
        "github.com/deepin-community/nfs-utils utils/exportfs/exports.man",
        "'uid 0 is normally mapped to a different id: the so-called anonymous or nobody uid. This mode of "
        "operation (called `root squashing') is the default, and can be turned off with no_root_squash.'",
    ),
    "systemd-mount-unit": Citation(
        "systemd.mount(5)",
        "github.com/systemd/systemd man/systemd.mount.xml ; "
        "https://www.freedesktop.org/software/systemd/man/latest/systemd.mount.html",
        "'Mount units must be named after the mount point directories they control.' 'Network mount units "
        "automatically acquire After= dependencies on remote-fs-pre.target, network.target and "
        "network-online.target, and gain a Before= dependency on remote-fs.target unless nofail mount option "
        "is set.' nofail: 'this mount will be only wanted, not required, by local-fs.target or "
        "remote-fs.target ... the boot will continue without waiting for the mount unit'. TimeoutSec=: "
        "'Configures the time to wait for the mount command to finish. If a command does not exit within the "
        "configured time, the mount will be considered failed'. x-systemd.mount-timeout=: 'can only be used "
        "in /etc/fstab, and will be ignored when part of the Options= setting in a unit file.'",
    ),
    "systemd-unit-escaping": Citation(
        "systemd.unit(5), String Escaping for Inclusion in Unit Names",
        "https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html",
        '\'given a string, any "/" character is replaced by "-", and all other characters which are not '
        'ASCII alphanumerics, ":", "_" or "." are replaced by C-style "\\x2d" escapes. In addition, '
        "\".\" is replaced with such a C-style escape when it would appear as the first character' ... 'any "
        'leading, trailing or duplicate "/" characters are removed from the string before transformation. '
        'Example: /foo//bar/baz/ becomes "foo-bar-baz".\'',
    ),
    "nfs-server-unit": Citation(
        "nfs.systemd(7) (nfs-utils; Debian 12's nfs-common 1:2.6.2)",
        "https://manpages.debian.org/bookworm/nfs-common/nfs.systemd.7.en.html",
        "'There are three unit files which are designed to be manually enabled.' 'nfs-server.service: This "
        "must be enabled to provide NFS service to clients. It starts and configures the required daemons in "
        "the required order.'",
    ),
}


def export_option(value: str) -> str:
    """One exports(5) option (``rw``, ``sync``, ``anonuid=1000``, ``sec=krb5:krb5p``)."""
    if not _OPTION.fullmatch(value):
        raise ValueError(f"{value!r} is not one export option (a word, optionally '=value'; no ',' or spaces)")
    return value


def mount_option(value: str) -> str:
    """One mount option for a unit's ``Options=`` (``hard``, ``vers=4.2``, ``timeo=600``)."""
    if not _OPTION.fullmatch(value):
        raise ValueError(f"{value!r} is not one mount option (a word, optionally '=value'; no ',' or spaces)")
    if value.startswith("x-systemd."):
        raise ValueError(f"{value!r}: systemd ignores x-systemd.* options in a mount unit; use timeout_s")
    if value in ("nofail", "auto", "noauto"):
        raise ValueError(f"{value!r}: gpuforge sets nofail itself (and mounts at boot); leave it out")
    return value


def mount_point(value: str) -> str:
    """A mount point whose systemd unit name needs no escape (systemd.unit(5): only '/' becomes '-'):
    components of letters, digits, '_' and '.', none starting with '.'; the name is then a plain shell
    word and a plain unit name (``/shared/slurm_state`` -> ``shared-slurm_state.mount``)."""
    if not re.fullmatch(r"(/[A-Za-z0-9_][A-Za-z0-9_.]{0,254}){1,16}", value):
        raise ValueError(
            f"{value!r}: a mount point here is an absolute path of components of letters, digits, '_' and '.' "
            "(not first): systemd escapes '-' and '+' in unit names ('\\x2d')"
        )
    return value


MountPoint = Annotated[str, AfterValidator(mount_point)]
ExportOption = Annotated[str, AfterValidator(export_option)]
MountOption = Annotated[str, AfterValidator(mount_option)]


class MountKind(StrEnum):
    NFS = "nfs"
    EXTERNAL = "external"


class NfsExport(StrictModel):
    """A directory the ``storage`` node serves over NFS (a line of /etc/exports.d/gpuforge.exports)."""

    name: Name = live(description="Export name (mounts refer to it)")
    path: SlurmPath = rolling(
        description="Directory on the storage node (made if missing). Rolling: the nodes that mount the export "
        "mount the new directory (their mount units change, and a changed unit remounts)"
    )
    options: list[ExportOption] = live(
        default_factory=lambda: ["rw", "sync", "no_subtree_check", "no_root_squash"],
        description="exports(5) options for every client. no_root_squash by default: root on the nodes "
        "(gpuforge, slurmctld's state directory, the validator's write check) writes as root; set "
        "root_squash for user data when root need not write there",
        min_length=1,
    )


class Mount(StrictModel):
    """A shared filesystem on the nodes a selector names."""

    name: Name = rolling(
        description="Mount name. Rolling: mounts are matched by name, so a new name is the mount removed and "
        "another added (and the name is in the unit's Description: the unit changes, and remounts)"
    )
    path: MountPoint = rolling(description="Mount point on the nodes (e.g. /home, /shared; letters, digits, _ .)")
    nodes: NodeSelector = rolling(description="Node groups or hostlists that mount it, comma-separated")
    kind: MountKind = rolling(
        MountKind.NFS, "nfs (gpuforge writes a systemd mount unit) or external (mounted by the site; checked only)"
    )
    export: Name | None = rolling(None, "An export of storage.exports (served by the node with role storage)")
    server: HostOrIp | None = rolling(None, "An existing NFS server (with remote_path), instead of export")
    remote_path: SlurmPath | None = rolling(None, "The existing server's exported directory (with server)")
    options: list[MountOption] = rolling(
        default_factory=lambda: ["hard", "noatime"],
        description="NFS mount options besides nofail, which gpuforge always sets (the boot does not wait "
        "for the server); rw or ro follows writable",
    )
    writable: bool = rolling(True, "Mounted read-write (the validator writes there) or read-only (it checks ro)")
    timeout_s: int = rolling(30, "Seconds a mount attempt may take (the unit's TimeoutSec)", ge=1, le=3600)


class Storage(StrictModel):
    """Shared storage: NFS exports and the mounts of each node group."""

    exports: list[NfsExport] = live(
        default_factory=list, description="NFS exports served by the node with role storage"
    )
    mounts: list[Mount] = rolling(default_factory=list, description="Shared filesystems mounted on the nodes")

    @field_validator("exports", "mounts")
    @classmethod
    def _unique_names(cls, v: list[NfsExport] | list[Mount]) -> list[NfsExport] | list[Mount]:
        names = [item.name for item in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"names must be unique: {', '.join(dup)}")
        return v
