"""``gpuforge lab``: bring real Debian test nodes up and down on this machine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.table import Table

from gpuforge.console import console
from gpuforge.spec import hostlist

from . import core, plan
from .lab_record import SharedFolder
from .plan import PlanError
from .system import LabError

app = typer.Typer(
    name="lab",
    help="Real Debian 12 nodes (systemd-nspawn containers with sshd) on this machine, plus a site mirror.",
    no_args_is_help=True,
)
err = console(stderr=True)
out = console()

T = TypeVar("T")
NameOpt = Annotated[str, typer.Option("--name", help="Lab name (bridge gf-<name>, state in /var/lib/gpuforge/lab).")]


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except PlanError as exc:  # bad input (a name, subnet, option): nothing was touched
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    except LabError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]: run `gpuforge lab down` to clean up a half-made lab")
        raise typer.Exit(130) from None


@app.command()
def up(
    nodes: Annotated[int, typer.Option("--nodes", "-n", min=1, help="Number of nodes (node1..nodeN).")] = (
        plan.DEFAULT_NODES
    ),
    name: NameOpt = plan.DEFAULT_NAME,
    subnet: Annotated[str, typer.Option("--subnet", help="Private IPv4 subnet; node i gets .(10+i).")] = (
        plan.DEFAULT_SUBNET
    ),
    shared: Annotated[
        list[str] | None,
        typer.Option(
            "--shared",
            metavar="NAME:PATH:NODES",
            help="The lab's stand-in for shared storage: a host folder (in the lab's state dir) bind-mounted "
            "at PATH into NODES (a hostlist, e.g. node[1-2]); repeat for more. Without it the lab keeps its own.",
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Boot the nodes from a baked image (`gpuforge image build`): a rootfs tarball or an OCI layout "
            "folder, instead of the stock rootfs (a new lab; `lab down` one made from another base first).",
        ),
    ] = None,
    releases: Annotated[
        list[str] | None,
        typer.Option(
            "--os",
            metavar="[NODE=]RELEASE",
            help=f"Debian release of the nodes ({', '.join(plan.LAB_RELEASES)}): RELEASE for every node, "
            "NODE=RELEASE for one (repeat). Unnamed nodes keep theirs (new ones: debian12); a node whose "
            "release changes is re-imaged.",
        ),
    ] = None,
) -> None:
    """Create, repair or resize the lab; a healthy lab of the right size is left as it is."""
    folders = _guard(lambda: [_shared_folder(x) for x in shared]) if shared else None
    chosen = _guard(lambda: plan.parse_releases(releases or [], nodes))
    log = lambda m: err.print(m, highlight=False)  # noqa: E731
    state = _guard(lambda: core.up(name, nodes, subnet, log=log, shared=folders, image=image, releases=chosen))
    out.print(f"lab {state.name} is up: " + ", ".join(f"{n.name}={n.address} ({n.os})" for n in state.nodes))
    out.print(f"  ssh: gpuforge lab ssh --name {state.name} node1   mirror: {state.mirror_url}")


def _shared_folder(text: str) -> SharedFolder:
    """``NAME:PATH:NODES`` (``--shared``) as a :class:`SharedFolder`."""
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise PlanError(f"--shared {text!r}: give NAME:PATH:NODES, e.g. slurm-state:/shared:node[1-2]")
    try:
        nodes = tuple(hostlist.expand(parts[2]))
    except ValueError as exc:
        raise PlanError(f"--shared {text!r}: {exc}") from None
    return SharedFolder(parts[0], parts[1], nodes)


@app.command()
def down(name: NameOpt = plan.DEFAULT_NAME) -> None:
    """Stop and remove the lab: containers, namespaces, bridge, veths, mounts and its mirror."""
    gone = _guard(lambda: core.down(name, log=lambda m: None))
    out.print(f"lab {name}: removed {len(gone)} objects" if gone else f"lab {name}: nothing to remove")


@app.command()
def status(
    name: NameOpt = plan.DEFAULT_NAME,
    as_json: Annotated[bool, typer.Option("--json", help="Print the lab state as JSON.")] = False,
) -> None:
    """Show the lab's nodes, addresses and whether each container runs."""
    state = _guard(lambda: core.status(name))
    if state is None:
        err.print(f"lab {name} is not up")
        raise typer.Exit(1)
    running = {n.name: core.node_running(name, n.name) for n in state.nodes}
    if as_json:
        data = state.to_dict()
        for n in data["nodes"]:  # type: ignore[attr-defined]
            n["running"] = running[n["name"]]
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title=f"lab {state.name}  ({state.subnet}, bridge {state.bridge} {state.bridge_address})")
    table.add_column("node")
    table.add_column("address")
    table.add_column("container")
    for n in state.nodes:
        table.add_row(n.name, n.address, "[green]running[/green]" if running[n.name] else "[red]stopped[/red]")
    out.print(table)
    out.print(f"mirror {state.mirror_url}  key {state.ssh_key}  known_hosts {state.known_hosts}")
    for f in state.shared:  # the lab's stand-in for shared storage
        where = Path(state.state_dir, "shared", f.name)
        out.print(f"shared storage {f.name}: {where} at {f.path} on {', '.join(f.nodes)}", highlight=False)


@app.command(context_settings={"allow_interspersed_args": False})
def ssh(
    node: Annotated[str, typer.Argument(help="node1..nodeN")],
    command: Annotated[list[str] | None, typer.Argument(help="Command to run (after --); none: a shell.")] = None,
    name: NameOpt = plan.DEFAULT_NAME,
) -> None:
    """Open a root shell on NODE, or run `-- COMMAND...` there and exit with its status."""
    cmd = list(command or [])
    if cmd[:1] == ["--"]:  # click keeps the separator when interspersed args are off
        cmd = cmd[1:]
    rc = _guard(lambda: core.ssh(name, node, cmd or None))
    raise typer.Exit(rc)


@app.command("spec")
def spec_cmd(
    name: NameOpt = plan.DEFAULT_NAME,
    base: Annotated[Path, typer.Option("--base", help="Spec to fit to the lab.")] = Path("inventories/lab.yaml"),
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
) -> None:
    """Print a spec for this lab: BASE with the lab's node addresses, SSH key, known_hosts and mirror."""
    import yaml

    from .spec import lab_spec_data

    state = core.status(name)
    if state is None:
        typer.echo(f"lab {name} is not up: gpuforge lab up --name {name}", err=True)
        raise typer.Exit(1)
    try:
        data = lab_spec_data(yaml.safe_load(base.read_text()), state)
    except (OSError, ValueError) as e:
        typer.echo(f"cannot fit {base} to lab {name}: {e}", err=True)
        raise typer.Exit(2) from None
    text = f"# {base.name} fitted to lab {name} by gpuforge lab spec\n" + yaml.safe_dump(data, sort_keys=False)
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


@app.command("box")
def box_cmd(
    add: Annotated[bool, typer.Option("--add", help="Also `vagrant box add` it (under VAGRANT_HOME).")] = False,
    release: Annotated[
        str, typer.Option("--os", metavar="RELEASE", help=f"Debian release ({', '.join(plan.LAB_RELEASES)}).")
    ] = plan.DEFAULT_OS,
) -> None:
    """Build (once; then cached) a Vagrant box for the libvirt provider from the lab's rootfs of a release."""
    import subprocess

    from .system import require_root
    from .vagrant_box import Box, build_box

    if release not in plan.LAB_RELEASES:
        err.print(f"[red]error:[/red] --os {release!r}: the lab runs {', '.join(plan.LAB_RELEASES)}", highlight=False)
        raise typer.Exit(2)

    def build() -> Box:
        require_root()
        return build_box(log=lambda m: err.print(m, highlight=False), release=release)

    box = _guard(build)
    out.print(f"box {box.name}: {box.box_file}  (ssh key {box.private_key})", highlight=False)
    if add:
        argv = ["vagrant", "box", "add", "--force", "--name", box.name, box.box_file]
        try:
            rc = subprocess.run(argv, check=False).returncode
        except OSError as e:
            err.print(f"[red]error:[/red] cannot run vagrant: {e}", highlight=False)
            raise typer.Exit(1) from None
        raise typer.Exit(rc)
    out.print(f"add it with: vagrant box add --name {box.name} {box.box_file}", highlight=False)
