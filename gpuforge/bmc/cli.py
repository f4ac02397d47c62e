"""``gpuforge power status|on|off|cycle|bootdev SPEC``: node power and boot override through each
node's BMC (Redfish or IPMI).

Exit status: 0 every BMC did what was asked (or already was there); 1 a BMC failed (unreachable,
not the pinned certificate, refused the credentials or the request, does not allow the boot
target: named per node); 2 bad input or refused (a bad spec, ``--limit``, ``--target`` or
credentials file, a node without ``bmc``, or ``off``/``cycle`` of a node in service without
``--force``): then no BMC was asked to change anything. Rows have one shape whatever the protocol,
which each names. ``bootdev`` changes no power (so it needs no drain); the PXE/DHCP/TFTP side of
network boot and provisioning are not in this slice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gpuforge.bmc import day2
from gpuforge.bmc.ipmi import IpmiSystem
from gpuforge.bmc.redfish import BootDone, RedfishSystem, ResetDone, SystemState
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.targets import BmcTarget, PowerInputError, bmc_targets, read_credentials
from gpuforge.bmc.transport import BmcError, Credentials
from gpuforge.spec import LIMIT_HELP, SpecError, hostlist, load_or_exit, resolve_nodes, select_limit
from gpuforge.spec.bmc import BmcProtocol
from gpuforge.spec.cluster import Cluster

app = typer.Typer(no_args_is_help=True, add_completion=False)

SpecArg = Annotated[Path, typer.Argument(help="Cluster spec (YAML)")]
LimitOpt = Annotated[str | None, typer.Option("--limit", help=LIMIT_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object: a row per node")]
TargetOpt = Annotated[
    BootTarget,
    typer.Option(
        "--target",
        case_sensitive=False,
        help="pxe: the network (Redfish Pxe, IPMI network); disk: a hard drive (Hdd, hd); none: no override",
    ),
]
PersistOpt = Annotated[
    bool, typer.Option("--persistent/--once", help="Every boot from now on, or the next boot only (the default)")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Power off/cycle nodes even when in service (running jobs are lost)")
]


def _refuse(message: str) -> NoReturn:
    print(f"gpuforge power: {message}", file=sys.stderr)
    raise typer.Exit(2)


def _prepare(spec: Path, limit: str | None) -> tuple[Cluster, list[tuple[BmcTarget, Credentials]]]:
    """The cluster and each selected node's BMC with its credentials; exit 2 on bad input."""
    loaded = load_or_exit(spec)
    cluster = Cluster.of(loaded, spec)
    try:
        names = select_limit(loaded, limit) if limit else [n.name for n in resolve_nodes(loaded)]
        targets = bmc_targets(cluster, names)
        creds: dict[Path, Credentials] = {}
        for t in targets:
            if t.credentials_file not in creds:
                creds[t.credentials_file] = read_credentials(t.credentials_file, t.field)
    except SpecError as e:
        _refuse(e.format())
    except PowerInputError as e:
        _refuse(str(e))
    return cluster, [(t, creds[t.credentials_file]) for t in targets]


def _state_row(s: SystemState) -> dict[str, Any]:
    return {"power_state": s.power_state, "boot_override": {"target": s.boot_target, "enabled": s.boot_enabled}}


def _system(target: BmcTarget, creds: Credentials) -> RedfishSystem | IpmiSystem:
    if target.protocol is BmcProtocol.IPMI:
        return IpmiSystem(target.endpoint, creds)
    return RedfishSystem(target.endpoint, creds, target.system_id)


def _status_row(target: BmcTarget, creds: Credentials) -> dict[str, Any]:
    head = {"node": target.node, "protocol": target.protocol.value}
    try:
        state = _system(target, creds).state()
    except BmcError as e:
        return {**head, "ok": False, "error": str(e)}
    return {**head, "ok": True, **_state_row(state)}


def _action_row(target: BmcTarget, creds: Credentials, action: PowerAction) -> dict[str, Any]:
    head = {"node": target.node, "protocol": target.protocol.value}
    try:
        done: ResetDone = _system(target, creds).act(action)
    except BmcError as e:
        return {**head, "ok": False, "action": action.value, "error": str(e)}
    row = {**head, "ok": True, "action": action.value, "reset_type": done.reset_type}
    return {**row, **_state_row(done.before)}


def _boot_row(target: BmcTarget, creds: Credentials, boot: BootTarget, persistent: bool) -> dict[str, Any]:
    head = {"node": target.node, "protocol": target.protocol.value, "action": "bootdev"}
    try:
        done: BootDone = _system(target, creds).set_boot(boot, persistent)
    except BmcError as e:
        return {**head, "ok": False, "error": str(e)}
    was = _state_row(done.before)["boot_override"]
    return {**head, "ok": True, "sent": done.sent, "was": was, **_state_row(done.after)}


def _override(boot: dict[str, Any]) -> str:
    return f"{boot['target'] or 'none'} ({boot['enabled'] or 'unknown'})"


def _line(row: dict[str, Any]) -> str:
    if not row["ok"]:
        return f"{row['node']}: error: {row['error']}"
    override = _override(row["boot_override"])
    if "action" not in row:
        return f"{row['node']}: {row['power_state'] or 'unknown'}, boot override {override}"
    if row["action"] == "bootdev":
        if row["sent"] is None:
            return f"{row['node']}: boot override already {override}: nothing sent"
        return f"{row['node']}: boot override {row['sent']} sent; was {_override(row['was'])}, reads back {override}"
    if row["reset_type"] is None:
        return f"{row['node']}: already {row['power_state']}: nothing sent"
    return f"{row['node']}: was {row['power_state'] or 'unknown'}: {row['reset_type']} sent"


def _report(rows: list[dict[str, Any]], json_out: bool) -> NoReturn:
    if json_out:
        print(json.dumps({"nodes": rows}, indent=2))
    else:
        for row in rows:
            print(_line(row))
    raise typer.Exit(0 if all(r["ok"] for r in rows) else 1)


def _guard(cluster: Cluster, nodes: list[str], action: PowerAction, force: bool) -> None:
    """Refuse (exit 2, nothing done) ``off``/``cycle`` of nodes in service, unless ``force`` (said loudly)."""
    refused = day2.refusals(cluster, nodes)
    if not refused:
        return
    lines = [f"  {n}: {why}" for n, why in refused.items()]
    if not force:
        _refuse(
            f"{action.value} refused for {hostlist.compress(list(refused))}, nothing was done:\n"
            + "\n".join(lines)
            + "\ndrain them first, or give --force (running work is lost)"
        )
    print(f"gpuforge power: WARNING: --force: {action.value} of nodes in service:", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)


@app.command("status")
def status_cmd(spec: SpecArg, limit: LimitOpt = None, json_out: JsonOpt = False) -> None:
    """Each node's power state and boot override, read from its BMC."""
    _, targets = _prepare(spec, limit)
    _report([_status_row(t, c) for t, c in targets], json_out)


def _act(spec: Path, limit: str | None, action: PowerAction, force: bool, json_out: bool) -> None:
    cluster, targets = _prepare(spec, limit)
    if action is not PowerAction.ON:
        _guard(cluster, [t.node for t, _ in targets], action, force)
    _report([_action_row(t, c, action) for t, c in targets], json_out)


@app.command("on")
def on_cmd(spec: SpecArg, limit: LimitOpt = None, json_out: JsonOpt = False) -> None:
    """Power the nodes on (nothing is sent to a node that is on)."""
    _act(spec, limit, PowerAction.ON, False, json_out)


@app.command("off")
def off_cmd(spec: SpecArg, limit: LimitOpt = None, force: ForceOpt = False, json_out: JsonOpt = False) -> None:
    """Power the nodes off at once (Redfish ForceOff, IPMI off); refused for a node in service unless --force."""
    _act(spec, limit, PowerAction.OFF, force, json_out)


@app.command("cycle")
def cycle_cmd(spec: SpecArg, limit: LimitOpt = None, force: ForceOpt = False, json_out: JsonOpt = False) -> None:
    """Power-cycle the nodes (Redfish PowerCycle, else ForceRestart; IPMI reset; a node that is off is
    powered on); refused for a node in service unless --force."""
    _act(spec, limit, PowerAction.CYCLE, force, json_out)


@app.command("bootdev")
def bootdev_cmd(
    spec: SpecArg, target: TargetOpt, persistent: PersistOpt = False, limit: LimitOpt = None, json_out: JsonOpt = False
) -> None:
    """Set the boot override of the nodes (Redfish BootSourceOverrideTarget, IPMI boot device): the next
    boot only unless --persistent; nothing is sent to a node already set so. Changes no power: no drain."""
    if target is BootTarget.NONE and persistent:
        _refuse("--persistent means nothing with --target none (it removes the override)")
    _, targets = _prepare(spec, limit)
    _report([_boot_row(t, c, target, persistent) for t, c in targets], json_out)
