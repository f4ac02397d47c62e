"""Problem messages a person can act on: YAML errors with line, column, the line quoted and a hint;
did-you-mean for every closed set of values (enums, literals, GPU models)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.model import Arch, ConfigMode, Connector, DriverFlavor, Role, Scheduler, SourceMode
from gpuforge.spec.suggest import close_matches, did_you_mean, enum_hint, expected_values

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
cluster: {name: t, scheduler: slurm}
node_groups:
  - name: ctl
    hosts: ctl1
    roles: [controller, accounting-db, compute]
    hardware: {sockets: 1, cores_per_socket: 4, threads_per_core: 1, real_memory_mb: 8000}
slurm:
  partitions:
    - {name: batch, nodes: ctl}
"""
HARDWARE = "    hardware: {sockets: 1, cores_per_socket: 4, threads_per_core: 1, real_memory_mb: 8000}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "x.yaml")
    return [i.format("x.yaml") for i in info.value.issues]


def test_role_typo_suggests_the_role_and_lists_the_allowed() -> None:
    (line,) = problems(SPEC.replace("compute]", "logn]"))
    assert line.startswith("x.yaml:5: node_groups[0].roles[2]: Input should be 'controller', 'compute', 'login'")
    assert line.endswith("(got 'logn'); did you mean 'login'?")


@pytest.mark.parametrize("enum", [Scheduler, Role, SourceMode, Connector, DriverFlavor, ConfigMode, Arch])
def test_every_enum_value_is_suggested_from_a_near_miss(enum: type) -> None:
    """A value with one letter dropped gets the value back (the rule is generic, not per field)."""
    allowed = [m.value for m in enum]  # type: ignore[attr-defined]
    for value in allowed:
        if len(value) >= 4:
            assert close_matches(value[:-1], allowed) == [value], (value, allowed)


def test_case_is_ignored_and_far_values_get_no_guess() -> None:
    assert did_you_mean("Login", ["compute", "login"]) == "did you mean 'login'?"
    assert did_you_mean("zzzz", ["compute", "login"]) == ""
    assert expected_values("'a', 'b-c' or 'd'") == ["a", "b-c", "d"]


def test_yaml_boolean_for_a_string_enum_gets_the_quoting_rule() -> None:
    assert enum_hint(True, ["NO", "YES"]) == "YAML reads an unquoted yes/on/true as true: write 'YES' in quotes"
    assert enum_hint(False, ["NO", "YES"]).endswith("write 'NO' in quotes")
    assert enum_hint(True, ["flannel"]) == ""
    assert enum_hint(3, ["a"]) == ""


def test_unknown_gpu_model_suggests_close_models() -> None:
    text = SPEC.replace("hardware: {sockets", "hardware: {gpu: {model: h200, count: 1}, sockets")
    text += "versions: {driver: {version: 550.163.01}}\n"
    (line,) = problems(text)
    assert "unknown GPU model 'h200'; known models: " in line
    assert "did you mean 'H200-141GB'" in line


def test_yaml_error_has_line_column_quoted_line_and_hint() -> None:
    text = SPEC.replace("roles: [controller, accounting-db, compute]\n" + HARDWARE, "roles: [controller, compute\n")
    (line,) = problems(text)
    head = "x.yaml:6: (top level): not valid YAML: "
    assert line.startswith(head + "did not find expected ',' or ']' at line 6, column 6")
    assert "'slurm:'" in line
    assert "flow sequence started at line 5, column 12: '    roles: [controller, compute'" in line
    assert line.endswith("hint: a '[' that is not closed with ']'")


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("a: b: c\n", "quote the value"),
        ("a: 1\n---\nb: 2\n", "remove the '---' line"),
        ("a: *x\n", "needs an anchor"),
        ("a: @x\n", "a value starting with '@' must be quoted"),
        ("a:\n  b: 1\n - c\n", "line up"),
        ('a: "\\q"\n', "use single quotes"),
    ],
)
def test_common_yaml_mistakes_get_a_hint(text: str, hint: str) -> None:
    (line,) = problems(text)
    assert "not valid YAML: " in line and "column" in line and hint in line, line


def test_quoted_line_hides_credentials() -> None:
    """A syntax error on a webhook line quotes it without the credential in the URL."""
    text = 'alerting:\n  url: "https://hooks.slack.com/services/T0/B0/SECRET\n'
    (line,) = problems(text)
    assert "SECRET" not in line
    (line,) = problems("a: https://user:pw@host/x: [\n")
    assert "pw@" not in line


def test_long_line_is_cut() -> None:
    (line,) = problems("a: b: " + "x" * 500 + "\n")
    assert "x" * 90 in line and "x" * 200 not in line


def test_check_json_gives_the_column() -> None:
    bad = REPO / "tests/spec/bad/yaml_syntax_error.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", "--json", str(bad)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    (error,) = json.loads(result.stdout)["errors"]
    assert (error["line"], error["column"]) == (7, 6)
