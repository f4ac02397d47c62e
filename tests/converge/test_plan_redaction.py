"""Webhook credentials never show: not in ``plan`` (text or JSON, the node's old copy included),
not in ``render -o``, not in a problem ``check`` reports.

The reproducer: a receiver ``https://alertuser:s3cretpass@hooks.example.org/...`` used to appear
in full in the plan's alertmanager.yml diff. Runs on simulated nodes (tests/converge/simulated.py).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.orchestrate.plan import plan
from gpuforge.spec import SpecError, load_spec
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.redact import REDACTED, redact_url_credentials, redact_webhook_urls
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec

PASSWORD = "s3cretpass"
PATH_TOKEN = "B0PATHTOKEN"
QUERY_TOKEN = "qu3rytoken"
WITH_PASSWORD = f"https://alertuser:{PASSWORD}@hooks.example.org/services/T0/{PATH_TOKEN}"
WITH_TOKENS = f"https://hooks.example.org/services/T0/{PATH_TOKEN}?token={QUERY_TOKEN}"
#: What the node holds from an earlier apply: an older URL with its own password.
OLD_FILE = [
    "route:",
    "  receiver: gpuforge-all",
    "receivers:",
    "- name: gpuforge-all",
    "  webhook_configs:",
    "  - url: https://olduser:0ldpassw0rd@hooks.example.org/old/0LDTOKEN",
]
SECRETS = (PASSWORD, PATH_TOKEN, QUERY_TOKEN, "0ldpassw0rd", "0LDTOKEN", "alertuser:", "olduser:")


def spec_data(url: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["monitoring"]["receivers"] = [{"name": "ops", "webhook_url": url}]
    return data


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return simulated(monkeypatch, tmp_path)


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} is shown:\n{text}"


def plan_texts(spec_file: Path) -> tuple[str, str]:
    """The plan of mon01 as printed and as JSON."""
    result = plan(load_cluster(spec_file), limit="mon01")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    result.print(console)
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    return printed, json.dumps(result.as_dict())


def test_the_reproducer_never_shows_the_password(tmp_path: Path, cluster: SimulatedCluster) -> None:
    """``https://user:secret@...``: refused with the password hidden, or planned with it hidden."""
    cluster.respond(r"cat .*/etc/prometheus/alertmanager\.yml", OLD_FILE)
    spec_file = write_simulated_spec(spec_data(WITH_PASSWORD), tmp_path, "hopper.yaml")
    try:
        load_spec(spec_file)
    except SpecError as e:
        assert_hidden(e.format())
        cli = CliRunner().invoke(app, ["plan", str(spec_file)])
        assert cli.exit_code == 2 and "Traceback" not in cli.output
        assert_hidden(cli.output)
        return
    printed, as_json = plan_texts(spec_file)
    assert "alertmanager.yml" in printed
    assert_hidden(printed)
    assert_hidden(as_json)


def test_plan_shows_the_alertmanager_diff_with_every_credential_hidden(
    tmp_path: Path, cluster: SimulatedCluster
) -> None:
    """Path and query tokens of the new URL, and the password of the node's old copy, are hidden;
    the diff still shows which receiver host changed."""
    cluster.respond(r"cat .*/etc/prometheus/alertmanager\.yml", OLD_FILE)
    spec_file = write_simulated_spec(spec_data(WITH_TOKENS), tmp_path, "hopper.yaml")
    printed, as_json = plan_texts(spec_file)
    assert_hidden(printed)
    assert_hidden(as_json)
    diffs = [d for op in json.loads(as_json)["hosts"]["mon01"]["operations"] for d in op["diffs"].values()]
    alertmanager = next(d for d in diffs if "alertmanager.yml (spec)" in d)
    assert f"+      - url: https://hooks.example.org/{REDACTED}" in alertmanager.splitlines()
    assert f"-  - url: https://hooks.example.org/{REDACTED}" in alertmanager.splitlines()


def test_render_output_hides_webhook_urls_but_the_node_gets_them(tmp_path: Path) -> None:
    spec_file = tmp_path / "hopper.yaml"
    spec_file.write_text(yaml_text.dump(spec_data(WITH_TOKENS)))
    cli = CliRunner().invoke(app, ["render", str(spec_file), "-o", str(tmp_path / "out"), "--limit", "mon01"])
    assert cli.exit_code == 0, cli.output
    written = (tmp_path / "out" / "mon01" / "etc" / "prometheus" / "alertmanager.yml").read_text()
    assert f"url: https://hooks.example.org/{REDACTED}" in written
    assert_hidden(written)
    from gpuforge.render import render_node
    from gpuforge.spec import resolve_nodes

    spec = load_spec(spec_file)
    mon = next(n for n in resolve_nodes(spec) if n.name == "mon01")
    node_copy = next(f for f in render_node(spec, mon) if f.path == "/etc/prometheus/alertmanager.yml")
    assert WITH_TOKENS.encode() in node_copy.data, "only what is shown is cut, never what the node gets"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("url: https://u:p%40ss@h.example/x", f"url: https://{REDACTED}@h.example/x"),
        ("'https://u:p@ss@h.example/x'", f"'https://{REDACTED}@h.example/x'"),
        ("https://h.example/x?token=t&v=1", f"https://h.example/x?token={REDACTED}&v={REDACTED}"),
        ("https://tok3n@h.example/", f"https://{REDACTED}@h.example/"),
        ("no url here: user@host.example", "no url here: user@host.example"),
    ],
)
def test_url_credentials_are_cut_from_any_text(text: str, shown: str) -> None:
    assert redact_url_credentials(text) == shown


def test_webhook_urls_keep_only_their_host() -> None:
    assert (
        redact_webhook_urls("- url: https://u:p@hooks.example/a/b?c=d\n")
        == f"- url: https://hooks.example/{REDACTED}\n"
    )
    assert redact_webhook_urls("url: http://alerts.example:9000/") == "url: http://alerts.example:9000/"


@pytest.mark.parametrize("json_out", [False, True])
def test_apply_output_hides_credentials_a_command_quoted(
    json_out: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing command's stderr (and a note) quoting a webhook URL is shown without its secrets."""
    from gpuforge import cli_apply
    from gpuforge.deploy.run import ApplyResult, HostResult

    monkeypatch.setattr(cli_apply, "out", Console(width=400, color_system=None))
    quoted = f"alertmanager: cannot reach {WITH_PASSWORD} nor {WITH_TOKENS}"
    host = HostResult("mon01", error=quoted, notes=[quoted])
    cli_apply.print_apply(ApplyResult({"mon01": host}), Path("hopper.yaml"), json_out)
    shown = capsys.readouterr().out
    assert "alertmanager: cannot reach" in shown
    for secret in (PASSWORD, QUERY_TOKEN):
        assert secret not in shown, shown


def test_apply_progress_hides_credentials() -> None:
    from gpuforge.cli_apply import without_credentials
    from gpuforge.progress import Milestone

    seen: list[str] = []
    on_event = without_credentials(seen.append)
    on_event(Milestone(f"mon01: {WITH_PASSWORD}"))
    on_event(f"running {WITH_TOKENS}")
    assert isinstance(seen[0], Milestone) and PASSWORD not in seen[0] and QUERY_TOKEN not in seen[1]
