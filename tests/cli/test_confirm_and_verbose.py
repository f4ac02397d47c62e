"""apply shows the plan and asks first (``--yes`` for automation; without a terminal, --yes is
required); ``-v``/``--log-file`` show and keep pyinfra's and gpuforge's logs, redacted."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge import progress
from gpuforge.cli import app
from gpuforge.deploy.runlog import run_files
from gpuforge.orchestrate.applied_record import last_applied
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.redact import redact_url_credentials
from tests import yaml_text
from tests.conftest import REPO, run_cli
from tests.converge.simulated import SimulatedCluster

QUESTION = "Apply these changes? [y/N] "


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """configure_logging changes process-wide loggers: put them back after each test."""
    names = (*progress.RUN_LOGGERS, *progress.SSH_LOGGERS)
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate)
             for n in names}  # fmt: skip
    yield
    for name, (level, handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate
    progress._configured = False


def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuforge.cli_converge.stdin_is_terminal", lambda: True)


def changed_anything(cluster: SimulatedCluster) -> bool:
    """Whether a node got an upload or a command that changes it (a plan only reads facts)."""
    sent = [c for cmds in cluster.commands.values() for c in cmds]
    return bool(cluster.uploads) or any("useradd" in c or "systemctl start" in c for c in sent)


def test_without_a_terminal_apply_needs_yes_and_touches_nothing(spec_file: Path, tmp_path: Path) -> None:
    cp = run_cli("apply", str(spec_file), env={"GPUFORGE_STATE_DIR": str(tmp_path / "state")})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    text = " ".join(cp.stderr.split())
    assert "stdin is not a terminal: pass --yes (-y) to apply without asking (scripts, CI)" in text
    assert not (tmp_path / "state").exists()


def test_a_no_at_the_question_changes_nothing(
    spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_a_terminal(monkeypatch)
    res = CliRunner().invoke(app, ["apply", str(spec_file), "--limit", "node1,node3"], input="n\n")
    assert res.exit_code == 2, res.output
    assert "Plan: 2 of 2 node(s) to change" in res.stderr
    assert "  node1: " in res.stderr and "  node3: " in res.stderr and QUESTION in res.stderr
    assert "apply cancelled: nothing was changed" in res.stderr
    assert cluster.commands and not changed_anything(cluster)  # facts were read for the plan; nothing else
    assert run_files() == [] and last_applied(load_cluster(spec_file)) is None


@pytest.mark.parametrize("answer", ["y\n", "yes\n", "Y\n"])
def test_a_yes_at_the_question_applies(
    spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    on_a_terminal(monkeypatch)
    res = CliRunner().invoke(app, ["apply", str(spec_file)], input=answer)
    assert res.exit_code == 0, res.output
    assert "Plan: 3 of 3 node(s) to change" in res.stderr and QUESTION in res.stderr
    assert changed_anything(cluster) and last_applied(load_cluster(spec_file)) is not None
    assert len(run_files()) == 1


def test_end_of_input_is_a_no(spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    on_a_terminal(monkeypatch)
    res = CliRunner().invoke(app, ["apply", str(spec_file)], input="")
    assert res.exit_code == 2 and "apply cancelled" in res.stderr
    assert not changed_anything(cluster)


def test_yes_applies_without_asking_and_still_shows_what_it_applies(
    spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Terraform's -auto-approve, a summary first, then no question; the summary is what apply
    knows without reading the nodes twice (the rolling change, what --tags leaves alone)."""
    on_a_terminal(monkeypatch)
    runner = CliRunner()
    res = runner.invoke(app, ["apply", str(spec_file), "-y", "--limit", "node[2-3]"])
    assert res.exit_code == 0, res.output
    assert QUESTION not in res.stderr
    assert "Applying to 2 node(s): node[2-3]" in res.stderr
    assert changed_anything(cluster)
    data = yaml.safe_load(spec_file.read_text())
    workers = data["node_groups"][1]
    workers["hardware"] = {**workers["hardware"], "real_memory_mb": 2000}  # a rolling field of theirs
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    res = runner.invoke(app, ["apply", str(spec_file), "-y", "--tags", "slurm"])
    text = " ".join(res.stderr.split())
    assert "Applying to 3 node(s): node[1-3] (only slurm)" in text, text
    assert "Left alone: node[2-3]: a rolling change (node_groups.workers.hardware.real_memory_mb) is pending" in text


def test_the_question_shows_a_pending_rolling_change_and_what_tags_leave_alone(
    spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(spec_file), "-y"]).exit_code == 0
    data = yaml.safe_load(spec_file.read_text())
    workers = data["node_groups"][1]
    assert workers["name"] == "workers"
    workers["hardware"] = {**workers["hardware"], "real_memory_mb": 2000}  # a rolling field of theirs
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    on_a_terminal(monkeypatch)
    res = runner.invoke(app, ["apply", str(spec_file)], input="n\n")
    text = " ".join(res.stderr.split())
    assert "Rolling change (node_groups.workers.hardware.real_memory_mb) on node[2-3]: drained" in text, text
    assert "Spec fields changed since the last apply: node_groups.workers.hardware.real_memory_mb (rolling)" in text
    res = runner.invoke(app, ["apply", str(spec_file), "--tags", "slurm"], input="n\n")
    text = " ".join(res.stderr.split())
    assert "Plan: 1 of 3 node(s) to change (only slurm)" in text
    assert "node1: " in text and "(slurm-config, slurm-controller)" in text
    assert "Left alone: node[2-3]: a rolling change (node_groups.workers.hardware.real_memory_mb) is pending" in text


def test_verbose_and_log_file_show_pyinfra_and_progress(
    spec_file: Path, cluster: SimulatedCluster, tmp_path: Path
) -> None:
    log_file = tmp_path / "run.log"
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--limit", "node2", "-vv", "--log-file", str(log_file)])
    assert res.exit_code == 0, res.output
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    text = log_file.read_text()
    assert " INFO pyinfra: [node2] Connected" in text
    assert " DEBUG pyinfra: " in text and " INFO gpuforge.progress: connected to 1 node(s)" in text
    assert "\x1b[" not in text  # no terminal colours in the file
    assert "INFO pyinfra: " in res.stderr and "gpuforge.progress" not in res.stderr  # the status line shows those


def test_without_verbose_pyinfra_stays_quiet(spec_file: Path, cluster: SimulatedCluster) -> None:
    res = CliRunner().invoke(app, ["plan", str(spec_file), "--limit", "node2"])
    assert res.exit_code == 0 and "pyinfra" not in res.stderr


def test_the_log_is_redacted(tmp_path: Path) -> None:
    log_file = tmp_path / "x.log"
    log_file.write_text("")
    log_file.chmod(0o644)
    progress.configure_logging(0, log_file, redact_url_credentials)
    logging.getLogger("pyinfra").debug("Connecting to: h ({'password': 'hunter2', '_sudo_password': 's3', 'port': 22})")
    logging.getLogger("gpuforge.progress").info("fetch https://user:secret@mirror.example/x?token=abc")
    text = log_file.read_text()
    assert "hunter2" not in text and "s3'" not in text and "secret" not in text and "abc" not in text
    assert "'password': '<redacted>'" in text and "https://<redacted>@mirror.example/x?token=<redacted>" in text
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600  # made private, though it existed


@pytest.mark.parametrize("command", ["plan", "apply", "validate"])
def test_a_log_file_that_cannot_be_opened_exits_2(tmp_path: Path, command: str) -> None:
    spec = REPO / "inventories" / "lab-slurm-minimal.yaml"
    bad = tmp_path / "no" / "such" / "dir" / "x.log"
    cp = run_cli(command, str(spec), "--yes" if command == "apply" else "-v", "--log-file", str(bad))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert f"--log-file {bad}: cannot open it: No such file or directory" in " ".join(cp.stderr.split())
