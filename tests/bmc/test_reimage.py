"""``gpuforge provision --reimage`` against real stand-ins: the Slurm tools stubbed behind a real
shell (answers that change while gpuforge waits: tests/converge/stub_slurm.py), sushy-tools' Redfish
emulator on 127.0.0.1 (TLS pinned), and a paramiko SSH server per node on its loopback address that
shows a fresh host key once the emulator has logged the node's reset; ``ssh-keyscan`` and
``ssh-keygen`` run for real."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bmc.redfish import BootDone, RedfishSystem, ResetDone
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.targets import BmcTarget
from gpuforge.bmc.transport import Credentials, Endpoint
from gpuforge.provision import hostkeys, reimage_cli, reimage_run
from gpuforge.spec import load_spec
from gpuforge.spec.cluster import Cluster
from tests.bmc import fake_ipmi, stub_controller
from tests.bmc.emulator import PASSWORD, USER, Emulator, credentials_file
from tests.bmc.reimage_site import Node, ssh_nodes, system_of, write_site
from tests.converge.stub_slurm import StubSlurm

REPO = Path(__file__).resolve().parents[2]
CREDS = Credentials(USER, PASSWORD)


class Watched:
    """A node's real Redfish system that notes, before each request, what Slurm said of the node then."""

    def __init__(self, real: RedfishSystem, node: str, slurm: StubSlurm, events: list[tuple[Any, ...]]) -> None:
        self.real, self.node, self.slurm, self.events = real, node, slurm, events

    def _note(self, what: str) -> None:
        state = self.slurm.node(self.node)
        self.events.append((self.node, what, state["drain"], self.slurm.jobs_running(self.node)))

    def set_boot(self, target: BootTarget, persistent: bool) -> BootDone:
        self._note(f"boot {target.value} persistent={persistent}")
        return self.real.set_boot(target, persistent)

    def act(self, action: PowerAction) -> ResetDone:
        self._note(f"power {action.value}")
        return self.real.act(action)


def system_state(emu: Emulator, node: str) -> tuple[str | None, str | None]:
    state = RedfishSystem(Endpoint("127.0.0.1", emu.port, emu.fingerprint), CREDS, system_of(emu, node)).state()
    return state.power_state, state.boot_target


def wait_on(emu: Emulator, node: str, timeout: float = 20) -> str | None:
    """The fake driver applies a power change 1 s after it is asked: poll until On (or time out)."""
    deadline = time.monotonic() + timeout
    while (seen := system_state(emu, node)[0]) != "On" and time.monotonic() < deadline:
        time.sleep(0.5)
    return seen


def log_size(emu: Emulator) -> int:
    return len(emu.log.read_text(errors="replace"))


def requests_of(emu: Emulator, node: str, since: int) -> list[str]:
    """The emulator's logged changes of the node's system after character ``since`` of its log, in
    order: PATCH (boot) and Reset (power)."""
    system = system_of(emu, node)
    out = []
    for line in emu.log.read_text(errors="replace")[since:].splitlines():
        if f"PATCH /redfish/v1/Systems/{system} " in line:
            out.append("PATCH")
        elif f"/Systems/{system}/Actions/ComputerSystem.Reset" in line:
            out.append("Reset")
    return out


class Site:
    """A spec, its stub controller and SSH nodes, and an in-process run with the real BMC transport."""

    def __init__(self, folder: Path, emu: Emulator, port: int, nodes: list[Node], **spec: Any) -> None:
        credentials_file(folder)
        known = folder / "known_hosts"
        known.write_text("".join(n.known_hosts_line(port) for n in nodes))
        self.path = write_site(folder, emu, port, known, **spec)
        self.spec = load_spec(self.path)
        self.slurm = StubSlurm(folder / "slurm", "ctl1", ["cpu1", "cpu2"])
        self.events: list[tuple[Any, ...]] = []
        self.said: list[str] = []
        self.since = log_size(emu)  # the emulator is the session's: this test's requests come after

    def transports(self, after: reimage_run.AfterBoot | None = None) -> reimage_run.Transports:
        def system(target: BmcTarget) -> reimage_run.BmcSystem:
            return Watched(RedfishSystem(target.endpoint, CREDS, target.system_id), target.node, self.slurm,
                           self.events)  # fmt: skip

        known = Cluster.of(self.spec, self.path).known_hosts
        assert known is not None
        recorded = functools.partial(hostkeys.recorded, known)
        return reimage_run.Transports(self.slurm.shell, system, hostkeys.scanned, recorded, after=after)

    def run(
        self, names: list[str], boot_timeout: float = 30, after: reimage_run.AfterBoot | None = None
    ) -> reimage_run.Outcome:
        cluster = Cluster.of(self.spec, self.path)
        found = reimage_cli.bmcs(cluster, names)
        timing = reimage_run.Timing(self.spec.rollout.drain_timeout, boot_timeout, drain_poll=0.2, boot_poll=0.3)
        targets = {n: t for n, (t, _) in found.items()}
        return reimage_run.run(cluster, names, targets, self.transports(after), timing, self.said.append)


@pytest.fixture
def nodes(emu: Emulator) -> list[Node]:
    return [Node.behind(emu, "cpu1"), Node.behind(emu, "cpu2")]


@pytest.fixture
def site_of(tmp_path: Path, emu: Emulator, nodes: list[Node]) -> Callable[..., Site]:
    return lambda port, **spec: Site(tmp_path, emu, port, nodes, **spec)


def test_a_job_that_ends_is_waited_for_then_pxe_then_cycle_then_a_new_host_key(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node]
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port)
        site.slurm.add_job(41, "cpu1", polls=3)  # squeue lists it three times, then it has ended
        outcome = site.run(["cpu1"])
    # the BMC was asked only once the node was drained and ran no job: the boot override first, then power
    assert site.events == [("cpu1", "boot pxe persistent=False", True, []), ("cpu1", "power cycle", True, [])]
    assert requests_of(emu, "cpu1", site.since) == ["PATCH", "Reset"]
    assert wait_on(emu, "cpu1") == "On" and system_state(emu, "cpu1")[1] == "Pxe"
    assert site.slurm.node("cpu1") == {"drain": True, "reason": "gpuforge: reimage", "history": ["DRAIN"]}
    assert [line.split(" ", 1)[0] for line in site.slurm.log()].count("squeue") >= 4  # polled while the job ran
    assert (outcome.back, outcome.ours) == (["cpu1"], {"cpu1": True})
    assert any(s.startswith("cpu1: was ") and s.endswith(" sent") for s in site.said), site.said
    assert any(s.startswith("cpu1: back: SSH 127.0.0.21:") for s in site.said), site.said
    assert site.said[-1] == (
        "cpu1: next: check cpu1's new host key and put it in known_hosts (ssh-keygen -R, then add it), then "
        f"gpuforge apply {site.path} --limit cpu1; then resume it: scontrol update NodeName=cpu1 State=RESUME"
    )
    assert site.slurm.node("cpu2")["history"] == [] and requests_of(emu, "cpu2", site.since) == []


def test_a_job_that_never_ends_stops_the_run_with_the_node_drained_and_no_bmc_asked(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node]
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port, drain_timeout=1)
        site.slurm.add_job(77, "cpu1", seconds=3600)
        with pytest.raises(reimage_run.Stop) as stop:
            site.run(["cpu1"])
    text = str(stop.value)
    assert text.startswith("cpu1: jobs still running on cpu1 after 1 s: 77 cpu1"), text
    assert text.endswith("left drained, no job cancelled, no BMC asked anything")
    assert site.slurm.node("cpu1") == {"drain": True, "reason": "gpuforge: reimage", "history": ["DRAIN"]}
    assert site.slurm.jobs_running("cpu1") == [77]
    assert site.events == [] and requests_of(emu, "cpu1", site.since) == []


def test_a_controller_that_cannot_answer_stops_the_run_before_anything_changes(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node]
) -> None:
    site = site_of(2222)
    site.slurm.fail("sinfo")
    with pytest.raises(reimage_run.Stop) as stop:
        site.run(["cpu1"])
    assert str(stop.value) == (
        "cpu1: cannot read their Slurm state: sinfo: error: Unable to contact slurm controller (connect failure); "
        "nothing was changed"
    )
    assert site.slurm.node("cpu1")["history"] == [] and site.events == [] and requests_of(emu, "cpu1", site.since) == []


def test_an_operator_drained_node_keeps_its_drain_and_reason_in_a_batch_of_two(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node]
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port, batch_size=2)
        site.slurm.drain_by_hand("cpu1", "bad DIMM, ticket 12")
        outcome = site.run(["cpu1", "cpu2"])
    assert site.slurm.node("cpu1") == {"drain": True, "reason": "bad DIMM, ticket 12", "history": []}
    assert site.slurm.node("cpu2") == {"drain": True, "reason": "gpuforge: reimage", "history": ["DRAIN"]}
    assert outcome.ours == {"cpu1": False, "cpu2": True}
    # one batch: both drained before either BMC was asked
    assert [e[:3] for e in site.events] == [
        ("cpu1", "boot pxe persistent=False", True), ("cpu1", "power cycle", True),
        ("cpu2", "boot pxe persistent=False", True), ("cpu2", "power cycle", True),
    ]  # fmt: skip
    assert "cpu1: drained by an operator (reason bad DIMM, ticket 12): left so; waiting for its jobs" in site.said
    assert site.said[-2].endswith("it stays drained: an operator drained it, gpuforge does not resume it")
    assert requests_of(emu, "cpu2", site.since) == ["PATCH", "Reset"]


def test_a_node_that_never_comes_back_is_named_after_the_bounded_wait(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node]
) -> None:
    nodes[1].answers = False
    with ssh_nodes(nodes) as port:
        site = site_of(port)
        t0 = time.monotonic()
        with pytest.raises(reimage_run.Stop) as stop:
            site.run(["cpu2"], boot_timeout=2)
    assert time.monotonic() - t0 < 20
    assert str(stop.value).startswith("cpu2: did not come back within 2 s (SSH did not answer with a new host key)")
    assert requests_of(emu, "cpu2", site.since) == ["PATCH", "Reset"]


def provision(*args: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**env, "GPUFORGE_STATE_DIR": str(folder / "state"), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "gpuforge", "provision", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert PASSWORD not in done.stdout + done.stderr
    return done


def controller_env(folder: Path, slurm: StubSlurm) -> tuple[Path, dict[str, str]]:
    """``ssh`` (logged, then the remote command run in a local shell: tests/bmc/stub_controller.py's)
    and the stub Slurm tools first on PATH; (the ssh log, the environment)."""
    bin_dir, log = folder / "ssh-bin", folder / "ssh.log"
    bin_dir.mkdir()
    ssh = stub_controller.SSH.replace("#!/bin/sh\n", f'#!/bin/sh\necho "$*" >> {log}\n', 1)
    (bin_dir / "ssh").write_text(ssh)
    (bin_dir / "ssh").chmod(0o755)
    return log, {**os.environ, "PATH": f"{bin_dir}:{slurm.bin}:{os.environ['PATH']}", "STUB_SLURM": str(slurm.state)}


def test_the_cli_reimages_with_yes_through_ssh_to_the_controller(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node], tmp_path: Path
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port)
        ssh_log, env = controller_env(tmp_path, site.slurm)
        done = provision(str(site.path), "--reimage", "--limit", "cpu2", "--yes", "--boot-timeout", "60",
                         env=env, folder=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        "cpu2: draining (Reason='gpuforge: reimage'); waiting up to 30 s for its jobs",
        "cpu2: boot override Pxe (Once) sent, reads back Pxe (Continuous)",  # sushy-tools: Continuous (test_bootdev)
    ], done.stdout
    assert lines[2] in ("cpu2: was Off: On sent", "cpu2: was On: ForceRestart sent"), done.stdout
    assert lines[3].startswith(f"cpu2: back: SSH 127.0.0.22:{port} answers with a new host key (ssh-rsa ")
    assert site.slurm.node("cpu2")["reason"] == "gpuforge: reimage"
    assert ssh_log.read_text().count("127.0.0.10") >= 3  # state, drain and wait, day-2 check: on the controller
    assert requests_of(emu, "cpu2", site.since) == ["PATCH", "Reset"] and wait_on(emu, "cpu2") == "On"


def test_without_yes_the_plan_is_printed_and_nothing_is_touched(
    site_of: Callable[..., Site], emu: Emulator, tmp_path: Path
) -> None:
    site = site_of(2222, batch_size=2)
    ssh_log, env = controller_env(tmp_path, site.slurm)
    done = provision(str(site.path), "--reimage", "--limit", "cpu1,cpu2", env=env, folder=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "batch 1: cpu1, cpu2"
    assert [line.split(": ")[1] for line in lines[1:6]] == ["drain", "boot-pxe", "power-cycle", "wait-back", "next"]
    assert "  cpu2: wait-back: wait up to 1800 s until SSH (127.0.0.22:2222) answers" in done.stdout
    assert lines[-1] == "nothing was changed: give --yes to reimage"
    assert not ssh_log.exists() and site.slurm.log() == []
    assert requests_of(emu, "cpu1", site.since) == requests_of(emu, "cpu2", site.since) == []


@pytest.mark.parametrize(
    ("bmc", "limit", "said"),
    [
        (("cpu1",), "cpu1,cpu2", "node_groups[2].bmc: cpu2 has no BMC: gpuforge cannot set its boot or power"),
        (("cpu1", "cpu2"), "cpu1,ctl1", "node_groups[0].boot: ctl1 has no boot entry"),
        (("cpu1", "cpu2"), "cpu9", "cpu9"),
        (("cpu1", "cpu2"), None, "--reimage needs --limit NODES"),
    ],
    ids=["no-bmc", "no-boot-entry", "not-in-spec", "no-limit"],
)
def test_bad_input_is_exit_2_before_anything_is_touched(
    site_of: Callable[..., Site], emu: Emulator, tmp_path: Path, bmc: tuple[str, ...], limit: str | None, said: str
) -> None:
    site = site_of(2222, bmc=bmc)
    ssh_log, env = controller_env(tmp_path, site.slurm)
    args = ["--limit", limit] if limit else []
    done = provision(str(site.path), "--reimage", *args, "--yes", env=env, folder=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert said in done.stderr and "nothing was changed" in done.stderr
    assert not ssh_log.exists() and site.slurm.log() == []
    assert requests_of(emu, "cpu1", site.since) == requests_of(emu, "cpu2", site.since) == []


def test_an_ipmi_node_is_set_to_network_boot_then_powered_on_through_the_cli_s_transports(
    tmp_path: Path, emu: Emulator
) -> None:
    """The same run with cpu2 behind pyghmi's BMC server (UDP, 127.0.0.1) and the command line's own
    transports (gpuforge.provision.reimage_cli.transports), only the controller swapped for the stub's shell."""
    with fake_ipmi.running(tmp_path, count=1) as bmcs:
        node = Node("cpu2", lambda: len(bmcs.controls()))
        with ssh_nodes([node]) as port:
            known = tmp_path / "known_hosts"
            known.write_text(node.known_hosts_line(port))
            path = write_site(tmp_path, emu, port, known, ipmi_ports={"cpu2": bmcs.ports[0]})
            fake_ipmi.credentials_file(tmp_path)
            slurm = StubSlurm(tmp_path / "slurm", "ctl1", ["cpu1", "cpu2"])
            cluster = Cluster.of(load_spec(path), path)
            found = reimage_cli.bmcs(cluster, ["cpu2"])
            tx = dataclasses.replace(reimage_cli.transports(cluster, found), controller=slurm.shell)
            said: list[str] = []
            timing = reimage_run.Timing(30, 30, drain_poll=0.2, boot_poll=0.3)
            reimage_run.run(cluster, ["cpu2"], {"cpu2": found["cpu2"][0]}, tx, timing, said.append)
        controls, boot_sets = bmcs.controls(), bmcs.boot_sets()
    port_ = str(bmcs.ports[0])
    assert boot_sets == [f"{port_} network"] and controls == [f"{port_} power_on"]  # the chassis was off
    assert said[1:3] == ["cpu2: boot override network (Once) sent, reads back network (Once)", "cpu2: was Off: on sent"]
    assert slurm.node("cpu2") == {"drain": True, "reason": "gpuforge: reimage", "history": ["DRAIN"]}


def test_a_drain_reason_with_an_escape_sequence_reaches_the_terminal_inert(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node], tmp_path: Path
) -> None:
    """The operator's drain reason comes from the controller (node output): printed without control characters."""
    with ssh_nodes(nodes) as port:
        site = site_of(port)
        site.slurm.drain_by_hand("cpu2", "bad DIMM \x1b[2J\x1b]0;owned\x07 ticket 12")
        _ssh_log, env = controller_env(tmp_path, site.slurm)
        done = provision(str(site.path), "--reimage", "--limit", "cpu2", "--yes", "--boot-timeout", "60",
                         env=env, folder=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout + done.stderr
    assert "cpu2: drained by an operator (reason bad DIMM [2J]0;owned ticket 12): left so" in done.stdout, done.stdout


# --------------------------------------------------------------------------- --accept-new-host-keys

#: ``gpuforge apply``/``validate`` stood in for by a real shell script: it logs its words, what
#: known_hosts says of each node at that moment and Slurm's drain of each, and exits with the status
#: the test wrote for its command (0 if none).
STEP_STUB = """#!/bin/sh
cmd=$1; shift
echo "$cmd $*" >> "$STEPS/log"
for n in 127.0.0.21 127.0.0.22; do
  key=$(ssh-keygen -F "[$n]:$PORT" -f "$KNOWN" | grep -v '^#' | cut -d' ' -f3 | cut -c1-12)
  echo "  known $n: $key" >> "$STEPS/log"
done
exit $(cat "$STEPS/$cmd.rc" 2>/dev/null || echo 0)
"""


def step_stub(folder: Path, site: Site, port: int) -> tuple[Path, reimage_run.AfterBoot]:
    """The stub's folder and the AfterBoot that runs it (the real known_hosts trust)."""
    steps = folder / "steps"
    steps.mkdir()
    (steps / "gpuforge").write_text(STEP_STUB)
    (steps / "gpuforge").chmod(0o755)
    known = Cluster.of(site.spec, site.path).known_hosts
    assert known is not None
    env = {**os.environ, "STEPS": str(steps), "PORT": str(port), "KNOWN": str(known)}

    def step(command: str) -> Callable[[list[str]], subprocess.CompletedProcess[str]]:
        argv = [str(steps / "gpuforge"), command, str(site.path), "--limit"]
        return lambda nodes: subprocess.run([*argv, ",".join(nodes)], capture_output=True, text=True, env=env)

    return steps, reimage_run.AfterBoot(functools.partial(hostkeys.trust, known), step("apply"), step("validate"))


def test_accepted_keys_then_apply_then_validate_then_the_resume_of_what_the_reimage_drained(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node], tmp_path: Path
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port, batch_size=2)
        site.slurm.drain_by_hand("cpu1", "bad DIMM, ticket 12")
        steps, after = step_stub(tmp_path, site, port)
        site.run(["cpu1", "cpu2"], after=after)
    new = {n.name: n.new.get_base64()[:12] for n in nodes}
    # known_hosts held each node's new key (and only it) before apply ran; apply, then validate
    keys = [f"  known 127.0.0.21: {new['cpu1']}", f"  known 127.0.0.22: {new['cpu2']}"]
    assert (steps / "log").read_text().splitlines() == [
        f"apply {site.path} --limit cpu1,cpu2",
        *keys,
        f"validate {site.path} --limit cpu1,cpu2",
        *keys,
    ]
    known = Cluster.of(site.spec, site.path).known_hosts
    assert known is not None and not Path(f"{known}.old").exists()
    assert hostkeys.recorded(known, "127.0.0.22", port) == {f"ssh-rsa {nodes[1].new.get_base64()}"}
    # the reimage's drain resumed; the operator's kept, reason and all
    assert site.slurm.node("cpu2") == {"drain": False, "reason": "", "history": ["DRAIN", "RESUME"]}
    assert site.slurm.node("cpu1") == {"drain": True, "reason": "bad DIMM, ticket 12", "history": []}
    assert site.said[-2:] == [
        "cpu2: resumed (drained by this reimage)",
        "cpu1: stays drained: an operator drained it, gpuforge does not resume it",
    ]


def test_a_failed_validate_stops_with_the_batch_drained_and_the_next_batch_untouched(
    site_of: Callable[..., Site], emu: Emulator, nodes: list[Node], tmp_path: Path
) -> None:
    with ssh_nodes(nodes) as port:
        site = site_of(port, batch_size=1)
        steps, after = step_stub(tmp_path, site, port)
        (steps / "validate.rc").write_text("1\n")
        with pytest.raises(reimage_run.Stop) as stop:
            site.run(["cpu1", "cpu2"], after=after)
    assert str(stop.value) == "cpu1: gpuforge validate exited 1: no output; left drained, not resumed"
    assert site.slurm.node("cpu1") == {"drain": True, "reason": "gpuforge: reimage", "history": ["DRAIN"]}
    assert site.slurm.node("cpu2")["history"] == [] and requests_of(emu, "cpu2", site.since) == []
    assert [line.split()[0] for line in (steps / "log").read_text().splitlines() if not line.startswith(" ")] == [
        "apply", "validate"
    ]  # fmt: skip


def test_the_plan_with_accepted_keys_names_the_steps_gpuforge_takes(
    site_of: Callable[..., Site], emu: Emulator, tmp_path: Path
) -> None:
    site = site_of(2222)
    _, env = controller_env(tmp_path, site.slurm)
    done = provision(str(site.path), "--reimage", "--limit", "cpu1", "--accept-new-host-keys", env=env, folder=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        f"  cpu1: next: record the host key it shows first in known_hosts (trust on first use), then gpuforge apply "
        f"{site.path} --limit cpu1 --include-drained, then gpuforge validate --limit cpu1; then, if this reimage "
        "drained it, gpuforge resumes it"
    ) in done.stdout.splitlines(), done.stdout
    assert site.slurm.node("cpu1")["history"] == [] and requests_of(emu, "cpu1", site.since) == []
    refused = provision(str(site.path), "--plan", "--accept-new-host-keys", env=env, folder=tmp_path)
    assert refused.returncode == 2 and "--accept-new-host-keys go with --reimage only" in refused.stderr
