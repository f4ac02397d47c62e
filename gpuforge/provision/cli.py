"""``gpuforge provision SPEC --plan | --render DIR | --serve [--render DIR] [--limit ...]``: what the
network boot of the nodes is, its files (dnsmasq's configuration and each node's iPXE script), and
serving it.

``--plan`` prints, per node, its boot MAC, address, boot mode, image folder and BMC (protocol,
address and the credentials file's path: the file is not read, no credential is shown) and the files
``--render`` would write; nothing is written or started. ``--render DIR`` writes those files, each
to a temp file renamed into place (mode 0644; no credential is in any of them).

``--serve`` checks the host first (the interface and its address, the TFTP root, every image file
a script loads, dnsmasq installed, root, the HTTP port free), writes the files as ``--render`` does
(into ``--render DIR``, else a fresh private folder removed afterwards), then runs dnsmasq and the
HTTP server in the foreground until Ctrl-C or SIGTERM (:mod:`gpuforge.provision.serve`).

Exit status: 0 done (``--serve``: stopped by a signal); 1 ``--serve`` only: dnsmasq or the HTTP
server exited by itself (named, with its last output); 2 bad input (a bad spec or ``--limit``, no
``provisioning`` section, a node of the limit without a ``boot`` section, not one of ``--plan``,
``--render`` and ``--serve``, a ``--serve`` check that failed), nothing written, nothing started.
``--reimage --limit NODES [--yes]`` drains, boots over the network and power-cycles running nodes
through their BMCs (:mod:`gpuforge.provision.reimage_cli`: its own exit statuses); the server that
answers their boot is ``--serve``, run beside it. Exporting the image over NFS is not in this command.
``--warewulf DIR --netdev NAME`` writes, and runs nothing, an export for a Warewulf 4 server
(:mod:`gpuforge.provision.warewulf`): exit 2 naming a group's missing image folder or OCI archive,
nothing written.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gpuforge.image.safe_files import write_file
from gpuforge.provision import http, preflight, reimage_cli, serve, warewulf
from gpuforge.render import pxe
from gpuforge.spec import LIMIT_HELP, SpecError, hostlist, load_or_exit, resolve_nodes, select_limit
from gpuforge.spec.bmc_rules import bmc_addresses
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.model import Spec
from gpuforge.spec.provisioning import interface_name

SpecArg = Annotated[Path, typer.Argument(help="Cluster spec (YAML)")]
PlanOpt = Annotated[bool, typer.Option("--plan", help="Print what would boot how, and the files; write nothing")]
RenderOpt = Annotated[
    Path | None,
    typer.Option("--render", metavar="DIR", help="Write dnsmasq.conf and http/ipxe/<node>.ipxe into this folder"),
]
ServeOpt = Annotated[
    bool,
    typer.Option(
        "--serve",
        help="Write the files (into --render DIR, else a fresh folder removed after) and serve the boot in the "
        "foreground: dnsmasq and the HTTP server of the scripts and images, until Ctrl-C or SIGTERM (needs root)",
    ),
]
WarewulfOpt = Annotated[
    Path | None,
    typer.Option(
        "--warewulf",
        metavar="DIR",
        help="Write a Warewulf 4 export into this folder: wwctl.sh (import each group's OCI archive, add each "
        "node), the archives and README.txt; run nothing on any host (needs --netdev)",
    ),
]
NetdevOpt = Annotated[
    str | None,
    typer.Option(
        "--netdev",
        metavar="NAME",
        help="--warewulf: the boot NIC's interface name on the nodes (Warewulf names the NIC of the boot MAC so)",
    ),
]
LimitOpt = Annotated[str | None, typer.Option("--limit", help=LIMIT_HELP)]
ReimageOpt = Annotated[
    bool,
    typer.Option(
        "--reimage",
        help="Reimage the --limit nodes, a rollout batch at a time: drain (Slurm; jobs never cancelled), BMC "
        "boot override PXE once, power cycle, wait until SSH answers with a new host key; without --yes, "
        "print the steps and change nothing",
    ),
]
YesOpt = Annotated[bool, typer.Option("--yes", help="--reimage: do it (without: print the plan only)")]
AcceptKeysOpt = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-keys",
        help="--reimage: when a batch is back, record the host key each node showed first after its power "
        "cycle in known_hosts (trust on first use on the provisioning network), then apply and validate the "
        "batch and resume the nodes gpuforge drained (without: stop and print these steps)",
    ),
]
BootTimeoutOpt = Annotated[
    int,
    typer.Option("--boot-timeout", min=1, metavar="SECONDS", help="--reimage: how long a node has to come back"),
]


def _refuse(*messages: str) -> NoReturn:
    for message in messages:
        print(f"gpuforge provision: {message}", file=sys.stderr)
    raise typer.Exit(2)


def _chosen(spec: Spec, limit: str | None) -> list[str]:
    """The nodes to boot: the limit's (each must have a ``boot`` section), else every node with one."""
    booting = {n.name for n in pxe.boot_nodes(spec)}
    if limit is None:
        return [n.name for n in resolve_nodes(spec) if n.name in booting]
    try:
        names = select_limit(spec, limit)
    except SpecError as e:
        _refuse(e.format())
    missing = [n for n in names if n not in booting]
    if missing:
        _refuse(f"{hostlist.compress(missing)}: no boot section in the spec (node_groups[].boot): not network-booted")
    return names


def _bmc_column(spec: Spec, folder: Path) -> dict[str, str]:
    """Each node's BMC as the plan shows it: protocol, address:port, and the credentials file's path."""
    out: dict[str, str] = {}
    for group in spec.node_groups:
        bmc = group.bmc
        if bmc is None:
            continue
        cred = Path(os.path.expanduser(bmc.credentials_file))
        cred = cred if cred.is_absolute() else folder / cred
        for name, address in zip(group.hostnames, bmc_addresses(group), strict=True):
            out[name] = f"{bmc.protocol.value} {address}:{bmc.service_port} (credentials file {cred})"
    return out


def _image_note(image: Path) -> str:
    """`` (no vmlinuz, initrd.img: ...)`` when the image folder lacks the files its script loads."""
    missing = [name for name in (pxe.KERNEL_FILE, pxe.INITRD_FILE) if not (image / name).is_file()]
    if not missing:
        return ""
    return f" (no {', '.join(missing)}: gpuforge image build --format qcow2 writes them)"


def plan_text(spec: Spec, folder: Path, names: list[str]) -> str:
    """The plan: the server, a row per node, the files ``--render`` writes."""
    prov = spec.provisioning
    assert prov is not None
    server = prov.server
    bmcs = _bmc_column(spec, folder)
    nodes = [n for n in pxe.boot_nodes(spec) if n.name in names]
    lines = [
        f"provisioning server: {server.address} on {server.interface}, mode {server.mode.value}, "
        f"TFTP {server.tftp_root}, HTTP {pxe.base_url(server)}",
    ]
    for n in nodes:
        image = Path(os.path.expanduser(n.image))
        image = image if image.is_absolute() else folder / image
        lines.append(
            f"  {n.name}: mac {n.mac}, address {n.address}, boot {n.mode.value}, image {image}"
            f"{_image_note(image)}, bmc {bmcs.get(n.name, 'none')}"
        )
    lines.append("files --render would write:")
    lines += [f"  {path}" for path in pxe.rendered_files(spec, names)]
    lines.append("nothing written, nothing started")
    return "\n".join(lines)


def render(spec: Spec, names: list[str], folder: Path) -> list[Path]:
    """Write the files into ``folder`` (created 0755 when missing), each atomically, mode 0644."""
    written: list[Path] = []
    for rel, text in pxe.rendered_files(spec, names).items():
        path = folder / rel
        try:
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            write_file(str(path), text.encode(), 0o644)
        except OSError as e:
            _refuse(f"--render {folder}: cannot write {rel}: {e.strerror or e}")
        written.append(path)
    return written


def serve_boot(spec: Spec, spec_folder: Path, names: list[str], render_to: Path | None) -> int:
    """``--serve``: every check, then the files, then dnsmasq and the HTTP server until a signal."""
    prov = spec.provisioning
    assert prov is not None
    server = prov.server
    issues = [
        *preflight.server_issues(server),
        *preflight.image_issues(spec, names, spec_folder),
        *preflight.host_issues(),
    ]
    if issues:
        _refuse(*issues)
    try:
        listener = http.listening(pxe.server_ip(server), server.http_port)
    except OSError as e:
        _refuse(preflight.bind_issue(server, e))
    folder = Path(os.path.abspath(render_to or tempfile.mkdtemp(prefix="gpuforge-provision-")))
    try:
        try:
            render(spec, names, folder)
        except BaseException:
            listener.close()
            raise
        dnsmasq = preflight.dnsmasq_path()
        assert dnsmasq is not None  # host_issues found it
        return serve.run(
            dnsmasq, folder, listener, preflight.routes(spec, names, folder, spec_folder), server.interface
        )
    finally:
        if render_to is None:
            shutil.rmtree(folder, ignore_errors=True)


def warewulf_export(spec: Spec, folder: Path, names: list[str], out: Path, netdev: str | None) -> None:
    """``--warewulf DIR``: every input checked (exit 2 naming it, nothing written), then the export."""
    if netdev is None:
        _refuse("--warewulf needs --netdev NAME: the boot NIC's interface name on the nodes (eno1, say)")
    try:
        interface_name(netdev)
        groups = warewulf.plan_groups(spec, names, folder)
    except warewulf.WarewulfInputError as e:
        _refuse(*e.issues)
    except ValueError as e:
        _refuse(f"--netdev: {e}")
    if out.exists() and not out.is_dir():
        _refuse(f"--warewulf {out}: not a folder")
    try:
        out.mkdir(mode=0o755, parents=True, exist_ok=True)
        written = warewulf.write_export(spec, groups, netdev, out)
    except OSError as e:
        _refuse(f"--warewulf {out}: cannot write: {e.strerror or e}")
    for path in written:
        print(f"wrote {path}")


def provision(
    spec: SpecArg, plan: PlanOpt = False, render_to: RenderOpt = None, serve_it: ServeOpt = False,
    warewulf_to: WarewulfOpt = None, netdev: NetdevOpt = None,
    limit: LimitOpt = None, reimage: ReimageOpt = False, yes: YesOpt = False,
    boot_timeout: BootTimeoutOpt = reimage_cli.BOOT_TIMEOUT, accept_new_host_keys: AcceptKeysOpt = False,
) -> None:  # fmt: skip
    """Network boot of the nodes: its plan (--plan), its files (--render DIR), serving it (--serve),
    reimaging running nodes through it (--reimage --limit NODES [--yes]), or handing the nodes to a
    Warewulf 4 server (--warewulf DIR --netdev NAME)."""
    modes = [plan, render_to is not None and not serve_it, serve_it, reimage, warewulf_to is not None]
    if modes.count(True) != 1:
        _refuse(
            "give --plan (print, write nothing), --render DIR (write the files), --serve [--render DIR] "
            "(write them and serve the boot), --reimage --limit NODES [--yes] or --warewulf DIR --netdev NAME "
            "(a Warewulf export), one of them"
        )
    if (yes or accept_new_host_keys) and not reimage:
        _refuse("--yes and --accept-new-host-keys go with --reimage only")
    if netdev is not None and warewulf_to is None:
        _refuse("--netdev goes with --warewulf only")
    loaded = load_or_exit(spec)
    if reimage:
        raise typer.Exit(reimage_cli.reimage_command(spec, loaded, limit, yes, boot_timeout, accept_new_host_keys))
    if loaded.provisioning is None:
        _refuse(f"{spec}: no provisioning section: nothing boots over the network")
    names = _chosen(loaded, limit)
    if not names:
        _refuse(f"{spec}: no node group has a boot section: nothing boots over the network")
    folder = Cluster.of(loaded, spec).folder
    if plan:
        print(plan_text(loaded, folder, names))
        return
    if warewulf_to is not None:
        warewulf_export(loaded, folder, names, warewulf_to, netdev)
        return
    if serve_it:
        raise typer.Exit(serve_boot(loaded, folder, names, render_to))
    assert render_to is not None
    for path in render(loaded, names, render_to):
        print(f"wrote {path}")
