"""The run log: every apply writes JSON lines under the state dir (0600) with each step run on each
node (layer, kind, summary, command, result, seconds); ``gpuforge log`` reads them back."""

from __future__ import annotations

import base64
import json
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.deploy.converge import Step, StepKind
from gpuforge.deploy.runlog import BadSince, RunLog, parse_since, run_files, select_entries, step_lines
from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate.apply import apply
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_KEY
from gpuforge.spec.cluster import load_cluster
from tests.converge.simulated import SimulatedCluster


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_apply_logs_every_step_on_every_node(spec_file: Path, cluster: SimulatedCluster, tmp_path: Path) -> None:
    assert apply(load_cluster(spec_file), limit="node1,node3").ok
    (path,) = run_files()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    log = lines(path)
    assert log[0]["event"] == "run" and log[0]["nodes"] == ["node1", "node3"] and log[0]["limit"] == "node1,node3"
    assert log[0]["spec"] == str(spec_file.resolve()) and log[0]["cluster"] == "gflab"
    steps = [e for e in log if e["event"] == "step"]
    assert {e["node"] for e in steps} == {"node1", "node3"}
    for e in steps:
        assert {
            "time",
            "run",
            "node",
            "layer",
            "operation",
            "kind",
            "summary",
            "result",
            "started",
            "duration_s",
        } <= set(e)
        assert log[0]["time"] <= e["started"] <= e["time"]
        assert e["result"] == "ok" and e["duration_s"] >= 0
    hosts = next(e for e in steps if e["node"] == "node1" and e.get("path") == "/etc/hosts")
    assert hosts["layer"] == "base" and hosts["kind"] == "upload" and hosts["summary"].startswith("write /etc/hosts")
    start = next(e for e in steps if e["node"] == "node1" and e["summary"] == "start slurmctld")
    assert start["layer"] == "slurm" and start["kind"] == "start" and "systemctl" in start["command"]
    # Every command a node was sent by a step is in the log with it.
    logged = {e["command"] for e in steps if e["node"] == "node3" and "command" in e}
    assert logged and logged <= set(cluster.commands["node3"])
    assert [e["node"] for e in log if e["event"] == "node"] == ["node1", "node3"]
    assert log[-1]["event"] == "end" and log[-1]["ok"] is True and log[-1]["changes"] > 0
    # No secret: not the munge key (uploaded as a file), in any form; not the health key nor a
    # keyed digest health.json carries (its upload's summary is the path, size and mode).
    key = SecretStore("gflab").munge_key()
    text = path.read_text()
    assert key.hex() not in text and base64.b64encode(key).decode() not in text
    sent = dict(cluster.uploads["node1"])  # staged path -> bytes; the install command names the target
    install = re.compile(r"install -D -m \S+ -o \S+ -g \S+ (\S+) (\S+)\.gpuforge-new")
    staged = {t: s for c in cluster.commands["node1"] for s, t in install.findall(c)}
    health_key, health_json = sent[staged[HEALTH_KEY]], sent[staged[HEALTH_CONFIG]]
    macs = [e["hmac"] for e in json.loads(health_json)["config_files"] if e["hmac"]]
    assert re.fullmatch(rb"[0-9a-f]{64}\n", health_key) and macs, "node1 was sent its key and keyed digests"
    assert health_key.decode().strip() not in text and not [m for m in macs if m in text]


def test_a_failed_step_is_logged_with_why_and_the_rest_not_run(spec_file: Path, cluster: SimulatedCluster) -> None:
    why = "useradd: cannot lock /etc/passwd; try again later."
    cluster.respond(r"useradd .* slurm$", [why], ok=False, host="node2")
    result = apply(load_cluster(spec_file))
    assert not result.hosts["node2"].ok
    log = lines(run_files()[-1])
    base = [e for e in log if e["event"] == "step" and e["node"] == "node2" and e["layer"] == "base"]
    results = [e["result"] for e in base]
    failed = results.index("failed")
    assert set(results[:failed]) == {"ok"} and set(results[failed + 1 :]) == {"not run"}
    assert base[failed]["summary"].startswith("create account slurm")
    assert base[failed]["error"] == why
    node2 = next(e for e in log if e["event"] == "node" and e["node"] == "node2")
    assert node2["result"] == "failed"
    assert log[-1] == {**log[-1], "event": "end", "ok": False}


def test_step_lines_hide_url_credentials_and_time_each_step() -> None:
    steps = [
        Step(StepKind.KEYRING, "fetch key", "curl -fsS https://user:secret@mirror.example/key?token=abc"),
        Step(StepKind.INSTALL, "install x", "apt-get install x"),
        Step(StepKind.START, "start x", "systemctl start x"),
    ]
    out = list(step_lines(steps, [10.0, 12.5], 13.0, ok=False, error="E: boom https://u:p@h/"))
    assert out[0]["command"] == "curl -fsS https://<redacted>@mirror.example/key?token=<redacted>"
    assert (out[0]["result"], out[0]["duration_s"]) == ("ok", 2.5)
    assert (out[1]["result"], out[1]["duration_s"], out[1]["error"]) == ("failed", 0.5, "E: boom https://<redacted>@h/")
    assert out[2] == {"kind": "start", "summary": "start x", "result": "not run"}


def test_parse_since_takes_dates_times_and_ages() -> None:
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("2026-11-20T14:00+00:00", now) == datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    assert parse_since("2026-11-20", now).tzinfo is not None
    with pytest.raises(BadSince, match="neither a date or time"):
        parse_since("last tuesday", now)


def test_select_entries_by_node_time_and_cluster() -> None:
    run = {"event": "run", "time": "2026-11-20T10:00:00+00:00", "cluster": "c", "nodes": ["a", "b"]}
    a = {"event": "step", "time": "2026-11-20T10:01:00+00:00", "node": "a"}
    b = {"event": "step", "time": "2026-11-20T10:02:00+00:00", "node": "b"}
    drain = {"event": "drain", "time": "2026-11-20T10:03:00+00:00", "nodes": ["b"]}
    end = {"event": "end", "time": "2026-11-20T10:04:00+00:00"}
    entries: list[dict[str, Any]] = [run, a, b, drain, end]
    assert select_entries(entries, node="a") == [run, a, end]
    assert select_entries(entries, node="b") == [run, b, drain, end]
    assert select_entries(entries, node="zz") == []
    assert select_entries(entries, since=datetime(2026, 11, 20, 10, 2, tzinfo=UTC)) == [b, drain, end]
    assert select_entries(entries, cluster="other") == []


def test_gpuforge_log_prints_what_was_done_to_a_node(spec_file: Path, cluster: SimulatedCluster) -> None:
    assert apply(load_cluster(spec_file), limit="node1").ok
    assert apply(load_cluster(spec_file), limit="node3").ok
    runner = CliRunner()
    res = runner.invoke(app, ["log", "--node", "node3"])
    assert res.exit_code == 0, res.output
    out = res.stdout.splitlines()
    assert "apply of " in out[0] and str(spec_file.resolve()) in out[0] and "--limit node3" in out[0]
    assert any("  node3  base  upload  ok  " in line and line.endswith("/etc/hosts") for line in out)
    assert not any("node1" in line for line in out)
    every = runner.invoke(app, ["log", "--json"]).stdout.splitlines()
    assert [json.loads(line)["event"] for line in every].count("run") == 2
    last = [json.loads(line) for line in runner.invoke(app, ["log", "--last", "--json"]).stdout.splitlines()]
    assert {e["run"] for e in last} == {run_files()[-1].stem} and last[0]["nodes"] == ["node3"]
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    res = runner.invoke(app, ["log", "--since", future])
    assert res.exit_code == 0 and res.stdout == "" and "no apply logged" in res.stderr


def test_gpuforge_log_bad_since_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))
    res = CliRunner().invoke(app, ["log", "--since", "yesterday"])
    assert res.exit_code == 2 and "--since: 'yesterday' is neither a date or time" in res.stderr


def test_a_line_cut_by_a_crash_is_skipped_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))
    log = RunLog.create("c")
    log.start_run(tmp_path / "s.yaml", "c", nodes=["n1"])
    log.write("step", node="n1", layer="base", kind="upload", summary="write /etc/hosts", result="ok")
    log.close()
    with log.path.open("a") as f:
        f.write('{"time": "2026-11-2')
    res = CliRunner().invoke(app, ["log"])
    assert res.exit_code == 0 and "1 line(s) could not be read" in res.stderr
    assert "n1  base  upload  ok  -  write /etc/hosts" in res.stdout


def test_apply_refuses_when_the_run_log_cannot_be_written(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "runs").write_text("a file where the folder goes")
    res = CliRunner().invoke(app, ["apply", str(spec_file), "--yes"])
    assert res.exit_code == 2, res.output
    assert "cannot write the run log in " in res.stderr and "nothing was changed" in res.stderr
    assert cluster.commands == {}


#: What a node may write into an error or a logged line: an OSC 52 clipboard write, a cursor move, Rich markup.
HOSTILE = "boom \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[1;1H [/x] [bold]done[/bold]"


def test_gpuforge_log_prints_no_escape_sequence_a_node_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review item 7: control characters from a node are shown as ``\\xNN``, never sent to the terminal."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))
    log = RunLog.create("c")
    log.start_run(tmp_path / "s.yaml", "c", nodes=["n1"])
    log.write("step", node="n1", layer="base", kind="command", summary="x", result="failed", error=HOSTILE)
    log.close()
    res = CliRunner().invoke(app, ["log"])
    assert res.exit_code == 0 and "\x1b" not in res.stdout and "\x07" not in res.stdout
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in res.stdout


def test_apply_table_shows_node_text_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's error holding ``[/x]`` (Rich raised MarkupError on it) and escape sequences: printed as text."""
    import io

    from rich.console import Console

    from gpuforge import cli_apply
    from gpuforge.deploy.run import HostResult
    from gpuforge.orchestrate.apply import ApplyResult

    buf = io.StringIO()
    monkeypatch.setattr(cli_apply, "out", Console(file=buf, force_terminal=True, width=400))
    result = ApplyResult({"n1": HostResult("n1", error=HOSTILE)}, waiting={"n2": HOSTILE})
    cli_apply.print_apply(result, Path("s.yaml"), json_out=False)
    text = buf.getvalue()
    assert "[/x] [bold]done[/bold]" in text and "\\x1b]52;c;cm0gLXJmIH4=\\x07" in text
    assert "\x1b]52" not in text and "\x07" not in text
