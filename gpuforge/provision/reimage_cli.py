"""``gpuforge provision SPEC --reimage --limit NODES [--yes]``: the command's input checks and its
real transports (SSH to the controller, the nodes' BMCs, ``ssh-keyscan``) around
:mod:`gpuforge.provision.reimage_run`.

Exit status: 0 every node came back (or, without ``--yes``, the plan was printed and nothing was
changed); 1 a step failed (named: a drain wait that ended with jobs running, a BMC error, a node
that did not come back); 2 bad input, nothing touched: no ``--limit``, a node not in the spec,
without a boot entry or a BMC, not a Slurm compute node, a Kubernetes cluster, or an unreadable
credentials file.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

from gpuforge.bmc.ipmi import IpmiSystem
from gpuforge.bmc.redfish import RedfishSystem
from gpuforge.bmc.targets import BmcTarget, PowerInputError, bmc_targets, read_credentials
from gpuforge.bmc.transport import Credentials
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.discover import printable
from gpuforge.provision import hostkeys, reimage, reimage_run
from gpuforge.spec import SpecError, select_limit
from gpuforge.spec.bmc import BmcProtocol
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.model import Spec

#: The most characters of one printed line (a line may quote a node's output).
OUTPUT_CHARS = 2000

#: Seconds a node has to come back after its power cycle (firmware, PXE, the image's first boot).
BOOT_TIMEOUT = 1800


def _err(*lines: str) -> None:
    for line in lines:
        print(f"gpuforge provision: {printable(line, OUTPUT_CHARS)}", file=sys.stderr)


def _say(line: str) -> None:
    """A progress line: it may carry a node's words (a drain reason, ssh's stderr), so no control
    characters and cut."""
    print(printable(line, OUTPUT_CHARS))


def chosen(spec: Spec, limit: str | None) -> tuple[list[str], list[str]]:
    """(nodes, issues): the limit's nodes and every reason they cannot be reimaged."""
    if limit is None:
        return [], ["--reimage needs --limit NODES: the nodes to reimage (never the whole cluster by default)"]
    try:
        names = select_limit(spec, limit)
    except SpecError as e:
        return [], [e.format()]
    return names, reimage.input_issues(spec, names)


def bmcs(cluster: Cluster, names: list[str]) -> dict[str, tuple[BmcTarget, Credentials]]:
    """Each node's BMC with its credentials (PowerInputError: no BMC, an unreadable file)."""
    targets = bmc_targets(cluster, names)
    creds: dict[Path, Credentials] = {}
    for t in targets:
        if t.credentials_file not in creds:
            creds[t.credentials_file] = read_credentials(t.credentials_file, t.field)
    return {t.node: (t, creds[t.credentials_file]) for t in targets}


def gpuforge_step(cluster: Cluster, command: str, *options: str) -> Callable[[list[str]], CompletedProcess[str]]:
    """``gpuforge COMMAND SPEC --limit NODES OPTIONS`` as a child process: its progress on this terminal,
    its error output kept for the reimage's own message."""

    def run(nodes: list[str]) -> CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpuforge", command, str(cluster.path), "--limit", ",".join(nodes), *options]
        return subprocess.run(argv, stdout=None, stderr=subprocess.PIPE, text=True, errors="replace", check=False)

    return run


def after_boot(cluster: Cluster, known: Path) -> reimage_run.AfterBoot:
    """Trust (``known``: known_hosts), then ``gpuforge apply --include-drained --yes`` and ``gpuforge validate``."""
    return reimage_run.AfterBoot(
        functools.partial(hostkeys.trust, known),
        gpuforge_step(cluster, "apply", "--include-drained", "--yes"),
        gpuforge_step(cluster, "validate"),
    )


def transports(
    cluster: Cluster, found: dict[str, tuple[BmcTarget, Credentials]], accept_new_host_keys: bool = False
) -> reimage_run.Transports:
    """The real transports: SSH to the first controller, each node's BMC, ssh-keyscan and known_hosts;
    with ``accept_new_host_keys``, what follows a batch's return (:func:`after_boot`)."""
    ctl = reimage.controller(cluster.spec)

    def controller(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        assert ctl is not None  # only called in a Slurm cluster
        return remote.run(cluster, ctl, command, timeout=timeout)

    def system(target: BmcTarget) -> reimage_run.BmcSystem:
        creds = found[target.node][1]
        if target.protocol is BmcProtocol.IPMI:
            return IpmiSystem(target.endpoint, creds)
        return RedfishSystem(target.endpoint, creds, target.system_id)

    known = hostkeys.known_hosts_file(cluster.known_hosts)
    after = after_boot(cluster, known) if accept_new_host_keys else None
    return reimage_run.Transports(
        controller, system, hostkeys.scanned, functools.partial(hostkeys.recorded, known), after=after
    )


def reimage_command(
    spec_path: Path, loaded: Spec, limit: str | None, yes: bool, boot_timeout: int, accept_new_host_keys: bool = False
) -> int:
    """The whole ``--reimage``: checks (2), the plan without ``--yes`` (0), else the run (0 or 1)."""
    names, issues = chosen(loaded, limit)
    if issues:
        _err(*issues, "nothing was changed")
        return 2
    cluster = Cluster.of(loaded, spec_path)
    try:
        found = bmcs(cluster, names)
    except PowerInputError as e:
        _err(str(e), "nothing was changed")
        return 2
    if not yes:
        print(reimage.plan_text(cluster, names, boot_timeout, accept_new_host_keys))
        return 0
    timing = reimage_run.Timing(loaded.rollout.drain_timeout, boot_timeout)
    targets = {n: t for n, (t, _) in found.items()}
    try:
        reimage_run.run(cluster, names, targets, transports(cluster, found, accept_new_host_keys), timing, _say)
    except reimage_run.Stop as e:
        _err(f"reimage stopped: {e}")
        return 1
    return 0
