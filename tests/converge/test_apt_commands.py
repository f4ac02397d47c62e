"""The apt command lines run for real by ``sh`` against fake apt/dpkg tools: scenario in, calls out.

The fakes log every call; the node paths in the commands are redirected into a temporary
directory (the test refuses to run a command that still names a real system path).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuforge.deploy import apt

FAKE_TOOL = r"""#!/bin/sh
# Fake {name}: log the call, then act by the scenario files in $SCEN.
[ "{name}" = timeout ] || printf '%s%s %s\n' "${{BOUNDED:+timeout }}" {name} "$(printf %s "$*" | tr '\n' ' ')" \
  >> "$SCEN/calls"
{body}
"""
BODIES = {
    "apt-get": r"""
case "$*" in
  *" update") s=$(cat "$SCEN/update_stalls" 2>/dev/null || echo 0)
              if [ "$s" -gt 0 ]; then  # some progress on fd 3, then none: a hung apt
                echo $((s - 1)) > "$SCEN/update_stalls"; echo "dlstatus:1:0.0000:Retrieving file 1 of 3" >&3
                exec /bin/sleep 600
              fi
              n=$(cat "$SCEN/update_failures" 2>/dev/null || echo 0)
              if [ "$n" -gt 0 ]; then
                echo $((n - 1)) > "$SCEN/update_failures"; echo "E: Failed to fetch" >&2; exit 100
              fi
              touch "$SCEN/lists/mirror_Packages"; exit 0;;
  *" -f install") exit 0;;
  *" install "*) [ -e "$SCEN/lists/mirror_Packages" ] || { echo "E: Unable to locate package" >&2; exit 100; }
                 [ -e "$SCEN/dpkg_journal_blocks_install" ] && [ -n "$(ls -A "$SCEN/updates")" ] && {
                   echo "E: dpkg was interrupted, you must manually run 'dpkg --configure -a'" >&2; exit 100; }
                 exit 0;;
esac
exit 0""",
    "apt-cache": r"""[ -e "$SCEN/lists_corrupt" ] && [ -e "$SCEN/lists/mirror_Packages" ] && exit 100; exit 0""",
    "dpkg": r"""
case "$*" in
  *--configure\ -a) [ -e "$SCEN/configure_fails" ] && exit 1; rm -f "$SCEN"/updates/* "$SCEN/statuses"; exit 0;;
esac
exit 0""",
    "dpkg-query": r"""cat "$SCEN/statuses" 2>/dev/null || printf 'ii \nrc \n'""",
    # timeout BOUND [-k N] CMD...: record the bound, run the command.
    "timeout": r"""while [ "$1" = "-k" ]; do shift 2; done; shift; BOUNDED=1 exec "$@" """,
    # Backoff and the update watchdog's ticks pass in a hundredth of a second.
    "sleep": "exec /bin/sleep 0.01",
}


@dataclass
class Run:
    returncode: int
    calls: list[str]
    stderr: str


@pytest.fixture
def node(tmp_path: Path) -> Path:
    scen = tmp_path / "scen"
    for d in ("bin", "updates", "lists", "cache"):
        (scen / d).mkdir(parents=True)
    for name, body in BODIES.items():
        tool = scen / "bin" / name
        tool.write_text(FAKE_TOOL.format(name=name, body=body))
        tool.chmod(0o755)
    return scen


def run(command: str, scen: Path) -> Run:
    redirected = (
        command.replace("/var/lib/dpkg/updates", str(scen / "updates"))
        .replace("/var/lib/apt/lists", str(scen / "lists"))
        .replace("/var/cache/apt", str(scen / "cache"))
        .replace("/proc/", f"{scen / 'proc'}/")  # none: this machine's own apt-get is not the node's
    )
    assert not re.search(r"/var/(lib|cache)/(dpkg|apt)|\s/proc/", redirected), "a real system path is left"
    env = {"PATH": f"{scen / 'bin'}:/usr/bin:/bin", "SCEN": str(scen)}
    cp = subprocess.run(["sh", "-c", redirected], env=env, capture_output=True, text=True, timeout=60)
    calls_file = scen / "calls"
    calls = calls_file.read_text().splitlines() if calls_file.exists() else []
    # The watchdog's one-second ticks depend on timing: left out; the backoff sleeps stay.
    return Run(cp.returncode, [_short(c) for c in calls if c != "sleep 1"], cp.stderr)


def _short(call: str) -> str:
    """``apt-get -q -y -o X=1 install --no-install-recommends munge`` -> ``apt-get install munge``."""
    words = call.split()
    if words[:1] == ["sleep"]:
        return call
    noise = {"-q", "-y", "-W", "--no-install-recommends", "--error-on=any", "--allow-downgrades"}
    kept = [
        w
        for i, w in enumerate(words)
        if w != "-o"
        and not (i and words[i - 1] == "-o")
        and w not in noise
        and not w.startswith(("--force-", "-f="))
        and not w.isdigit()
    ]
    return " ".join(kept)


def test_healthy_node_installs_with_the_lists_at_hand(node: Path) -> None:
    (node / "lists" / "mirror_Packages").touch()
    r = run(apt.install_command(["munge"]), node)
    assert r.returncode == 0, r.stderr
    assert r.calls == ["apt-cache policy", "dpkg-query", "apt-get install munge"]
    assert "gpuforge:" not in r.stderr


def test_fresh_node_refreshes_lists_once_then_installs(node: Path) -> None:
    r = run(apt.install_command(["munge", "slurmd=22.05.8-4"]), node)
    assert r.returncode == 0, r.stderr
    assert r.calls == [
        "apt-cache policy",
        "dpkg-query",
        "apt-get install munge slurmd=22.05.8-4",
        "timeout apt-get update",
        "apt-get install munge slurmd=22.05.8-4",
    ]


def test_interrupted_dpkg_is_configured_before_the_install(node: Path) -> None:
    """The second apply of issue 9: a killed dpkg left its journal; apt refuses until it is replayed."""
    (node / "lists" / "mirror_Packages").touch()
    (node / "updates" / "0001").write_text("Package: nvidia-kernel-dkms\nStatus: install ok half-configured\n")
    (node / "dpkg_journal_blocks_install").touch()
    r = run(apt.install_command(["nvidia-driver=535.261.03-1"]), node)
    assert r.returncode == 0, r.stderr
    assert r.calls == [
        "apt-cache policy",
        "dpkg --configure -a",
        "apt-get -f install",  # finish what the interrupted run had started
        "apt-get install nvidia-driver=535.261.03-1",
    ]
    assert "gpuforge: an earlier package run was interrupted" in r.stderr


def test_a_package_in_an_in_between_state_alone_triggers_the_repair(node: Path) -> None:
    (node / "lists" / "mirror_Packages").touch()
    (node / "statuses").write_text("ii \niF \nii \n")  # nvidia-kernel-dkms half-configured
    r = run(apt.install_command(["munge"]), node)
    assert r.returncode == 0, r
    assert r.calls[:4] == ["apt-cache policy", "dpkg-query", "dpkg --configure -a", "apt-get -f install"]


def test_a_failing_repair_stops_before_any_install(node: Path) -> None:
    (node / "updates" / "0001").touch()
    (node / "configure_fails").touch()
    r = run(apt.install_command(["munge"]), node)
    assert r.returncode != 0
    assert not any(c.startswith("apt-get install munge") for c in r.calls), r.calls


def test_unparsable_lists_are_dropped_and_fetched_anew(node: Path) -> None:
    (node / "lists" / "mirror_Packages").write_text("garbage")
    (node / "lists_corrupt").touch()
    (node / "cache" / "pkgcache.bin").touch()
    r = run(apt.install_command(["munge"]), node)
    assert r.returncode == 0, r.stderr
    assert r.calls == ["apt-cache policy", "timeout apt-get update", "dpkg-query", "apt-get install munge"]
    assert "gpuforge: apt could not parse its package lists" in r.stderr
    assert not (node / "cache" / "pkgcache.bin").exists()


def test_update_retries_with_backoff_and_a_failed_update_never_installs(node: Path) -> None:
    (node / "update_failures").write_text("2")
    r = run(apt.install_command(["munge"], update_first=True), node)
    assert r.returncode == 0, r.stderr
    assert r.calls.count("timeout apt-get update") == 3
    pauses = [int(c.split()[1]) for c in r.calls if c.startswith("sleep ")]
    assert len(pauses) == 2 and 5 <= pauses[0] < 15 and 15 <= pauses[1] < 45, pauses  # jittered backoff
    assert r.calls[-1] == "apt-get install munge"

    (node / "update_failures").write_text("3")
    (node / "calls").unlink()
    r = run(apt.install_command(["munge"], update_first=True), node)
    assert r.returncode != 0 and r.calls.count("timeout apt-get update") == 3
    assert "apt-get install munge" not in r.calls


def test_a_stalled_update_is_ended_and_retried(node: Path) -> None:
    """apt-get update that stops making progress (seen through apt-cacher-ng at 24 nodes: asleep for
    ever, no connection open) is ended by the watchdog after UPDATE_STALL_S ticks, then retried."""
    (node / "update_stalls").write_text("1")
    r = run(apt.install_command(["munge"], update_first=True), node)
    assert r.returncode == 0, r.stderr
    assert r.calls == [
        "apt-cache policy",
        "dpkg-query",
        "timeout apt-get update",
        r.calls[3],
        "timeout apt-get update",
        "apt-get install munge",
    ]
    assert re.fullmatch(r"sleep ([5-9]|1[0-4])", r.calls[3]), r.calls
    assert f"gpuforge: apt-get update made no progress for {apt.UPDATE_STALL_S} s: ended it" in r.stderr
    assert not list(node.glob("tmp*")), "the watchdog's status file is removed"


def test_a_time_bound_ends_only_network_waits() -> None:
    """``timeout`` wraps ``apt-get update`` (with apt's caches off) and nothing that runs dpkg."""
    command = apt.install_command(["munge"], update_first=True) + "; " + apt.REPAIR
    bounded = re.findall(r"timeout ([^;|&{}]*)", command)
    assert bounded, command
    for b in bounded:
        assert b.removesuffix(' 3>"$s" ').endswith(" update") and "--error-on=any" in b, b  # fd 3: the watchdog
        assert "-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=" in b, b
    for unbounded in ("dpkg --force-confold --force-confdef --configure -a", "install --no-install-recommends"):
        assert unbounded in command
        assert not re.search(r"timeout [^;|&{}]*" + re.escape(unbounded), command)
    assert "DPkg::Lock::Timeout=600" in apt.APT_INSTALL


def test_fakes_cover_every_tool_the_commands_call() -> None:
    """If the commands start calling another package tool, the fakes (and this test) must learn it."""
    command = apt.install_command(["x"], update_first=True) + "; " + apt.REPAIR
    command = command.replace(apt.WAIT_FOR_PACKAGE_RUN, "true")  # reads /proc only: tested on its own below
    command = re.sub(r"\$\{[^}]*\}|\$\(\([^)]*\)\)", "", command)  # parameter and arithmetic expansions
    command = command.replace(apt.UPDATE_FUNCTION + "()", "").replace(apt.UPDATE_FUNCTION, "true")
    command = command.replace("gf_backoff()", "").replace("gf_backoff", "true")
    segments = re.split(r"[;&|{}()]|\$\(|\b(?:if|then|else|fi|while|do|done|case|in|esac)\b", command)
    command_word = r"\s*(?:!\s*)?(?:[A-Z_]+=\S+\s+)*([a-z][a-z-]*)(?![=\w])"  # not a variable assignment
    words = {m.group(1) for seg in segments if (m := re.match(command_word, seg))}
    shell = {"echo", "ls", "find", "rm", "true", "cut", "grep", "mktemp", "tail", "kill", "wait", "return", "od"}
    assert words - shell == set(BODIES), words


def test_healthy_states_do_not_trigger_the_repair(node: Path) -> None:
    """Installed, held, removed-with-config: nothing to repair (``dpkg --audit`` would list md5sum-less ones)."""
    (node / "lists" / "mirror_Packages").touch()
    (node / "statuses").write_text("ii \nhi \nrc \nun \n")
    r = run(apt.install_command(["munge"]), node)
    assert r.returncode == 0 and "dpkg --configure -a" not in r.calls, r


def test_a_failed_install_is_reported_by_the_line_naming_its_package() -> None:
    """apt's fetch failure of the .deb comes first, then a retried update fails too: the report keeps
    the package line in front of the last lines (a mirror stopped mid-apply, issue 14)."""
    from gpuforge.deploy.run import _last_lines

    stderr = (
        "W: some warning\n"
        "E: Failed to fetch http://deb.debian.org/debian/pool/main/p/prometheus-node-exporter/"
        "prometheus-node-exporter_1.5.0-1+b6_amd64.deb  Unable to connect to 10.213.9.1:3142:\n"
        "E: Unable to fetch some archives, maybe run apt-get update or try with --fix-missing?\n"
        "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm-updates/InRelease  Unable to connect\n"
        "E: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    )
    assert _last_lines(stderr).split(" / ") == [
        "E: Failed to fetch http://deb.debian.org/debian/pool/main/p/prometheus-node-exporter/"
        "prometheus-node-exporter_1.5.0-1+b6_amd64.deb  Unable to connect to 10.213.9.1:3142:",
        "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm-updates/InRelease  Unable to connect",
        "E: Some index files failed to download. They have been ignored, or old ones used instead.",
    ]
    assert _last_lines("a\nb\nc\nd\n") == "b / c / d"  # nothing names a package: the last lines


def fake_proc(tmp_path: Path, processes: dict[int, str]) -> Path:
    """A /proc with one ``<pid>/stat`` per process: ``pid (comm) state ...``, as the kernel writes it."""
    root = tmp_path / "proc"
    for pid, stat in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} {stat} 1 1 1 0 -1 4194560\n")
    return root


def wait_command(proc: Path, bound_s: int | None = None) -> str:
    command = apt.WAIT_FOR_PACKAGE_RUN.replace("/proc/", f"{proc}/")
    return command if bound_s is None else command.replace(str(apt.PACKAGE_RUN_WAIT_S), str(bound_s))


def test_the_repair_waits_for_a_package_run_left_going_on_the_node(tmp_path: Path) -> None:
    """An interrupted run's dpkg (pid 4242, running, gone after 2 s) is waited for before the
    repair runs, with one line saying so; zombies and other processes are not waited for."""
    import time

    proc = fake_proc(
        tmp_path, {1: "(systemd) S", 77: "(dpkg) Z", 90: "(dpkg-deb) S", 91: "(my dpkg) S", 4242: "(dpkg) S"}
    )
    ends = f"(sleep 2; rm -rf {proc}/4242) & "
    started = time.monotonic()
    cp = subprocess.run(["sh", "-c", f"{ends}{wait_command(proc)}; echo done"], capture_output=True, text=True)
    assert time.monotonic() - started >= 2 and cp.returncode == 0 and cp.stdout == "done\n", cp
    assert cp.stderr == "gpuforge: waiting for dpkg (pid 4242), a package run already going on, to finish\n"
    idle = subprocess.run(["sh", "-c", f"{wait_command(proc)}; echo done"], capture_output=True, text=True)
    assert idle.stdout == "done\n" and idle.stderr == ""  # only a zombie, dpkg-deb and look-alikes left


@pytest.mark.parametrize("name", ["apt-get", "apt", "dpkg"])
def test_the_repair_gives_up_on_a_package_run_that_never_ends(tmp_path: Path, name: str) -> None:
    proc = fake_proc(tmp_path, {313: f"({name}) D"})
    cp = subprocess.run(["sh", "-c", f"{wait_command(proc, 1)}; echo repaired"], capture_output=True, text=True)
    assert cp.returncode == 1 and "repaired" not in cp.stdout
    assert f"gpuforge: {name} (pid 313) still runs after 1 s: not repairing under it" in cp.stderr


def test_the_repair_waits_before_dpkg_configure() -> None:
    assert apt.REPAIR_DPKG.index(apt.WAIT_FOR_PACKAGE_RUN) < apt.REPAIR_DPKG.index("dpkg --force-confold")
    assert apt.REPAIR.endswith(apt.REPAIR_DPKG)
