"""Handing the nodes to a Warewulf 4 server: each group's OCI archive and the ``wwctl`` commands
that import it and define the nodes (``gpuforge provision SPEC --warewulf DIR --netdev NAME``).

Pure functions of the spec and the image folders, but :func:`write_export`. The export folder
holds ``wwctl.sh`` (a ``set -eu`` script of the commands of :data:`WWCTL`), ``README.txt`` and
``images/<group>.oci.tar``. No overlay: gpuforge puts nothing per node on a node at boot (the lab
writes identity itself; elsewhere the image makes its own host keys and machine-id, and
``gpuforge apply`` brings everything else over SSH).

Invariants: every command line is built by :func:`command`, which accepts only the subcommands,
flags and argument counts of :data:`WWCTL` and quotes every word with :func:`shlex.quote`; every
value comes from a spec type (node names, MACs, IPv4 addresses, group and cluster names) or is
checked here (the interface name, the Warewulf image name); nothing secret is read, so none is
written (no munge key, no BMC credential: the BMC section is not read at all).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from gpuforge.image import oci
from gpuforge.image.safe_files import replacing, write_file
from gpuforge.render import pxe
from gpuforge.spec import hostlist
from gpuforge.spec.citation import Citation
from gpuforge.spec.model import Spec
from gpuforge.spec.provisioning import interface_name

#: Warewulf v4.7.0 (the tag's commit), where the commands and flags below were read.
COMMIT = "ff7518265dc21e1533eae9b58c411e9a28d3991f"
_SRC = f"https://github.com/warewulf/warewulf/blob/{COMMIT}"
SCRIPT, README, IMAGE_DIR = "wwctl.sh", "README.txt", "images"


@dataclass(frozen=True)
class WwctlCommand:
    """One ``wwctl`` subcommand as gpuforge calls it: the long flags it passes with a value
    (``--name=value``), those it passes bare, and how many positional arguments cobra accepts."""

    flags: frozenset[str]
    switches: frozenset[str]
    min_args: int
    max_args: int | None
    source: Citation


WWCTL: dict[tuple[str, ...], WwctlCommand] = {
    ("image", "import"): WwctlCommand(frozenset(), frozenset({"build"}), 1, 2, Citation(
        "warewulf internal/app/wwctl/image/imprt/root.go (v4.7.0; 4.6 renamed container to image)",
        f"{_SRC}/internal/app/wwctl/image/imprt/root.go",
        'Use: "import [OPTIONS] SOURCE [NAME]" ... " * /path/to/archive/tar/ball" ... Args: cobra.RangeArgs(1, 2) ... '
        'BoolVarP(&SetBuild, "build", "b", false, "Build image after pulling")',
    )),
    ("node", "add"): WwctlCommand(
        frozenset({"image", "netdev", "hwaddr", "ipaddr", "netmask", "gateway"}), frozenset(), 1, None, Citation(
            "warewulf internal/app/wwctl/node/add/root.go and internal/pkg/node/datastructure.go (v4.7.0)",
            f"{_SRC}/internal/pkg/node/datastructure.go",
            'add/root.go: Use: "add [OPTIONS] NODENAME", Args: cobra.MinimumNArgs(1), '
            "vars.nodeConf.CreateFlags(baseCmd); datastructure.go: ImageName lopt:\"image\" comment:\"image name\"; "
            'NetDev: lopt:"netdev" "the device for given network", lopt:"hwaddr" "the device\'s HW address for '
            'given network", lopt:"ipaddr" "IPv4 address in given network", lopt:"netmask" "the network\'s '
            'netmask", lopt:"gateway" "the node\'s IPv4 network device gateway"',
        )),
    ("configure", "dhcp"): WwctlCommand(frozenset(), frozenset(), 0, 0, Citation(
        "warewulf userdocs/server/configuration.rst and internal/app/wwctl/configure/dhcp/root.go (v4.7.0)",
        f"{_SRC}/userdocs/server/configuration.rst",
        "(Run ``wwctl configure dhcp`` to update ``dhcpd.conf`` when nodes are added, removed, or changed.); "
        'root.go: Use: "dhcp [OPTIONS]", Args: cobra.NoArgs',
    )),
    ("configure", "hostfile"): WwctlCommand(frozenset(), frozenset(), 0, 0, Citation(
        "warewulf userdocs/server/configuration.rst and internal/app/wwctl/configure/hostfile/root.go (v4.7.0)",
        f"{_SRC}/userdocs/server/configuration.rst",
        "``wwctl configure hostfile`` updates the Warewulf server's ``/etc/hosts`` file to include expected "
        "configuration for the server itself as well as the known names of the cluster nodes; "
        'root.go: Use: "hostfile [OPTIONS]", Args: cobra.NoArgs',
    )),
    ("overlay", "build"): WwctlCommand(frozenset(), frozenset(), 0, None, Citation(
        "warewulf internal/app/wwctl/overlay/build/root.go (v4.7.0)",
        f"{_SRC}/internal/app/wwctl/overlay/build/root.go",
        'Use: "build [OPTIONS] NODENAME...", Short: "(Re)build node overlays", Args: cobra.ArbitraryArgs',
    )),
}  # fmt: skip
SOURCES: dict[str, Citation] = {
    "image-name": Citation(
        "warewulf internal/pkg/image/util.go (v4.7.0)", f"{_SRC}/internal/pkg/image/util.go",
        'func ValidName(name string) bool { if !util.ValidString("^[\\\\w\\\\-\\\\.\\\\:]+$", name)',
    ),
    "netname": Citation(
        "warewulf overlays/systemd.netname (in the default profile's system overlays, etc/nodes.conf; v4.7.0)",
        f"{_SRC}/overlays/systemd.netname/rootfs/etc/systemd/network/10-ww4-netname.link.ww",
        "{{- if and $netdev.Hwaddr $netdev.Device }} [Match] MACAddress={{$netdev.Hwaddr}} [Link] "
        "Name={{ $netdev.Device }}",
    ),
    "authorized-keys": Citation(
        "warewulf overlays/ssh.authorized_keys (in the default profile's runtime overlays, etc/nodes.conf; v4.7.0)",
        f"{_SRC}/overlays/ssh.authorized_keys/rootfs/root/.ssh/authorized_keys.ww",
        '{{Include "/root/.ssh/authorized_keys"}}',
    ),
    "host-keys": Citation(
        "warewulf overlays/ssh.host_keys (in the default profile's system overlays, etc/nodes.conf; v4.7.0)",
        f"{_SRC}/overlays/ssh.host_keys/rootfs/etc/ssh/ssh_host_ed25519_key.ww",
        '{{Include "keys/ssh_host_ed25519_key"}}',
    ),
}  # fmt: skip
#: Warewulf's image name rule (``image.ValidName``, :data:`SOURCES` ``image-name``).
IMAGE_NAME = re.compile(r"[\w.:-]+", re.ASCII)


class WarewulfInputError(ValueError):
    """Missing or bad input for the export; ``issues`` name the field or node each."""

    def __init__(self, issues: list[str]) -> None:
        super().__init__("; ".join(issues))
        self.issues = issues


@dataclass(frozen=True)
class WwNode:
    name: str
    mac: str
    address: str


@dataclass(frozen=True)
class WwGroup:
    """One node group as Warewulf gets it: its image (name, archive on this host) and its nodes."""

    group: str
    image: str
    archive: Path
    netmask: str
    nodes: tuple[WwNode, ...]


def command(words: tuple[str, ...], args: list[str], flags: dict[str, str | None] | None = None) -> str:
    """The shell line ``wwctl WORDS --flag=value... ARGS``, every word quoted. ValueError for a
    subcommand, flag or argument count that :data:`WWCTL` does not have."""
    known = WWCTL.get(words)
    if known is None:
        raise ValueError(f"wwctl {' '.join(words)}: not in the cited table")
    flags = flags or {}
    for name, value in flags.items():
        if name not in (known.switches if value is None else known.flags):
            raise ValueError(f"wwctl {' '.join(words)}: no flag --{name}{'' if value is None else '=VALUE'}")
    if len(args) < known.min_args or (known.max_args is not None and len(args) > known.max_args):
        raise ValueError(f"wwctl {' '.join(words)}: {len(args)} arguments")
    if any(a.startswith("-") for a in args):
        raise ValueError(f"wwctl {' '.join(words)}: an argument starts with '-': {args}")
    opts = [f"--{n}" if v is None else f"--{n}={v}" for n, v in flags.items()]
    return " ".join(shlex.quote(w) for w in ("wwctl", *words, *opts, *args))


def image_name(spec: Spec, group: str) -> str:
    """``<cluster>-<group>``: the OCI archive's own ref name (gpuforge image build), as Warewulf's image."""
    name = f"{spec.cluster.name}-{group}"
    if not IMAGE_NAME.fullmatch(name):
        raise WarewulfInputError([f"{name!r} is no Warewulf image name (letters, digits, '_', '-', '.', ':')"])
    return name


def _archive(folder: Path, image: str) -> Path:
    path = Path(os.path.expanduser(image))
    return (path if path.is_absolute() else folder / path) / oci.ARCHIVE


def plan_groups(spec: Spec, names: list[str], folder: Path) -> list[WwGroup]:
    """The groups of ``names`` (spec order), each with its archive; :class:`WarewulfInputError`
    naming ``node_groups[i].boot.image`` for a missing folder or archive, or a node without a MAC."""
    prov = spec.provisioning
    assert prov is not None
    netmask = str(ipaddress.IPv4Interface(prov.server.address).netmask)
    booting = {n.name: n for n in pxe.boot_nodes(spec, names)}
    issues: list[str] = []
    out: list[WwGroup] = []
    for gi, group in enumerate(spec.node_groups):
        chosen = [n for n in group.hostnames if n in names]
        if not chosen:
            continue
        at = f"node_groups[{gi}].boot"
        lacking = [n for n in chosen if n not in booting]
        if group.boot is None or lacking:
            issues.append(f"{at}.macs: no boot MAC for {hostlist.compress(lacking or chosen)}")
            continue
        archive = _archive(folder, group.boot.image)
        if not archive.parent.is_dir():
            issues.append(f"{at}.image: {archive.parent}: no such folder (gpuforge image build -o writes it)")
        elif not archive.is_file():
            issues.append(f"{at}.image: no {oci.ARCHIVE} in {archive.parent} (gpuforge image build --format oci)")
        nodes = tuple(WwNode(n, booting[n].mac, booting[n].address) for n in chosen)
        out.append(WwGroup(group.name, image_name(spec, group.name), archive, netmask, nodes))
    if issues:
        raise WarewulfInputError(issues)
    return out


def script(groups: list[WwGroup], netdev: str) -> str:
    """``wwctl.sh``: import each image (and build it), add each node, then DHCP, hosts and overlays."""
    interface_name(netdev)
    lines = [
        "#!/bin/sh",
        "# Written by gpuforge provision --warewulf for Warewulf 4.6 or later (wwctl read at v4.7.0,",
        f"# {COMMIT}). Run as root on the Warewulf server; the archives are beside this script.",
        "set -eu",
        'cd -- "$(dirname -- "$0")"',
    ]
    for g in groups:
        lines.append(command(("image", "import"), [f"{IMAGE_DIR}/{g.group}.oci.tar", g.image], {"build": None}))
    for g in groups:
        for n in g.nodes:
            flags: dict[str, str | None] = {
                "image": g.image, "netdev": netdev, "hwaddr": n.mac, "ipaddr": n.address, "netmask": g.netmask,
            }  # fmt: skip
            lines.append(command(("node", "add"), [n.name], flags))
    lines.append(command(("configure", "dhcp"), []))
    lines.append(command(("configure", "hostfile"), []))
    lines.append(command(("overlay", "build"), [n.name for g in groups for n in g.nodes]))
    return "\n".join(lines) + "\n"


def readme(spec: Spec, groups: list[WwGroup], netdev: str) -> str:
    """``README.txt``: what the folder holds, what to run on the Warewulf server, what follows the boot."""
    nodes = hostlist.compress(n.name for g in groups for n in g.nodes)
    images = [
        f"  {IMAGE_DIR}/{g.group}.oci.tar  Warewulf image {g.image}, nodes {hostlist.compress(n.name for n in g.nodes)}"
        for g in groups
    ]
    keys, host_keys = SOURCES["authorized-keys"], SOURCES["host-keys"]
    return "\n".join(
        [
            f"gpuforge export for Warewulf 4: cluster {spec.cluster.name}, nodes {nodes}",
            "",
            "Files",
            f"  {SCRIPT}  the wwctl commands (set -eu: it stops at the first that fails)",
            *images,
            "  No overlay: gpuforge puts nothing per node on a node at boot, and no secret is in this folder",
            "  (no munge key, no BMC credential: gpuforge apply brings the cluster's secrets over SSH).",
            "",
            "On the Warewulf server (Warewulf 4.6 or later: `wwctl image`; 4.5 and before named it `wwctl container`)",
            "  1. Copy this folder there; as root: sh wwctl.sh",
            "     It imports and builds each image (wwctl image import --build), adds each node with its image,",
            f"     boot MAC, address and netmask on network device {netdev} (Warewulf's netname overlays give the NIC",
            "     of that MAC this name), then updates DHCP and /etc/hosts and builds the nodes' overlays.",
            "     It only adds: a second run stops at the first image or node name Warewulf already has.",
            "  2. Do not run gpuforge provision --serve on the same network: Warewulf answers the nodes' boot now.",
            "  3. Power the nodes on (gpuforge power on SPEC --limit NODES, or by hand).",
            "",
            "After the boot (on the control host)",
            "  gpuforge reaches the nodes over SSH as root. Warewulf's default profile puts the server's",
            f"  /root/.ssh/authorized_keys on every node ({keys.where}):",
            "  add the control host's public key there before the nodes boot.",
            "  Warewulf's ssh.host_keys overlay gives every node the same host keys, the server's",
            f"  ({host_keys.where}): the control host's known_hosts meets those keys.",
            f"  Then: gpuforge apply SPEC --limit {nodes}",
            f"        gpuforge validate SPEC --limit {nodes}",
            "",
        ]
    )


def write_export(spec: Spec, groups: list[WwGroup], netdev: str, out: Path) -> list[Path]:
    """Write the export into ``out`` (made 0755 when missing): the script (0755), README (0644) and
    each archive (a hard link where the file system allows, else a copy), each renamed into place."""
    text, notes = script(groups, netdev), readme(spec, groups, netdev)
    (out / IMAGE_DIR).mkdir(mode=0o755, parents=True, exist_ok=True)
    written: list[Path] = []
    for g in groups:
        dest = out / IMAGE_DIR / f"{g.group}.oci.tar"
        with replacing(str(dest)) as tmp:
            os.unlink(tmp)
            try:
                os.link(g.archive, tmp)
            except OSError:
                shutil.copyfile(g.archive, tmp)
                os.chmod(tmp, 0o644)
        written.append(dest)
    write_file(str(out / SCRIPT), text.encode(), 0o755)
    write_file(str(out / README), notes.encode(), 0o644)
    return [*written, out / SCRIPT, out / README]
