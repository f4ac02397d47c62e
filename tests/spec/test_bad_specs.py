"""The bad-spec corpus: every broken spec in ``bad/`` is refused by ``gpuforge check``.

Each corpus file starts with comment lines:

``# expect: TEXT``   TEXT must be a substring of one error line (repeatable, one per problem);
                     corpus files write it as ``<field path>: <message>`` so that the line is
                     also checked for naming the field.
``# xfail: REASON``  a known gpuforge bug: the case is expected to fail (strictly, so that
                     the marker must be removed when the bug is fixed).

``gpuforge check FILE`` runs through the command's own function in this process (the output
captured as the CLI prints it), and must exit 2 with every problem on stderr: the file name, the
line number, the field path and the message on one line, and never a traceback. A sample of the
corpus also runs as a subprocess (``python -m gpuforge check``) and must print byte for byte the
same: what the in-process run proves is what the real command does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import typer

from gpuforge.cli_spec import check
from gpuforge.spec import SpecError, load_spec, parse_spec

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BAD = HERE / "bad"
CORPUS = sorted(BAD.glob("*.yaml"))

# Problems that have no place in the file, so no line number can be given (the section or
# key is absent, or the document is not a mapping). Everything else must carry a line.
NO_LINE = {
    "empty_file.yaml": "an empty document has no lines",
    "not_a_mapping.yaml": "the document as a whole is wrong",
    "missing_cluster.yaml": "the missing key has no line",
    "missing_slurm_section.yaml": "the missing section has no line",
    "missing_kubernetes_section.yaml": "the missing section has no line",
    "gpu_without_driver.yaml": "versions.driver is absent from the file",
    "many_rule_problems.yaml": "versions.driver is absent from the file",
    "not_utf8.yaml": "the file cannot be decoded",
}

# The environment of a pipe or CI job: no terminal width (rich falls back to 80 columns).
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"NO_COLOR": "1"}


@dataclass(frozen=True)
class Case:
    path: Path
    expects: tuple[str, ...]
    xfail: str | None


def read_case(path: Path) -> Case:
    expects: list[str] = []
    xfail = None
    # errors="replace": the corpus holds a file that is deliberately not UTF-8.
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].strip().partition(":")
        if key == "expect":
            expects.append(value.strip())
        elif key == "xfail":
            xfail = value.strip()
    return Case(path, tuple(expects), xfail)


CASES = [read_case(p) for p in CORPUS]


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def run_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", *args],
        cwd=REPO,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check_in_process(name: str) -> subprocess.CompletedProcess[str]:
    """``gpuforge check NAME`` (relative to the repository) through the command's function: its exit
    code and what it printed on stdout and stderr. An exception the CLI would not have handled is
    reported as a traceback in stderr and exit -1 (the corpus test then fails naming it)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            check(Path(name))
        except typer.Exit as e:
            code = e.exit_code
        except Exception as e:  # the corpus test names it
            code = -1
            print(f"Traceback (in process): {type(e).__name__}: {e}", file=sys.stderr)
    return subprocess.CompletedProcess(["gpuforge", "check", name], code, out.getvalue(), err.getvalue())


@cache
def corpus_results() -> dict[Path, subprocess.CompletedProcess[str]]:
    """``gpuforge check`` on every corpus file, once per session, in this process."""
    return {c.path: check_in_process(rel(c.path)) for c in CASES}


#: Corpus files that also run through the real command: field errors, rule errors, YAML that does
#: not parse, a file that is not UTF-8, an empty one (the sample covers each way a check can fail).
REAL_CLI_SAMPLE = (
    "many_field_problems.yaml",
    "many_rule_problems.yaml",
    "yaml_syntax_error.yaml",
    "not_utf8.yaml",
    "empty_file.yaml",
    "switch_cycle.yaml",
)


def test_the_real_command_prints_what_the_in_process_check_printed() -> None:
    names = [rel(BAD / n) for n in REAL_CLI_SAMPLE]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        real = dict(zip(names, pool.map(lambda n: run_check(n), names), strict=True))
    for name in names:
        in_process = corpus_results()[REPO / name]
        got = (real[name].returncode, real[name].stdout, real[name].stderr)
        assert got == (in_process.returncode, in_process.stdout, in_process.stderr), name


ISSUE_LINE = re.compile(r"^  (?P<file>\S+?)(?::(?P<line>\d+))?: (?P<rest>.*)$")
PATH_MESSAGE = re.compile(
    r"^(?P<path>\(top level\)|[a-z_][a-z0-9_]*(?:\[\d+\]|\.[^\s:\[]+)*)(?: \(node (?P<node>[^)]+)\))?: (?P<msg>.+)$"
)


def issue_lines(stderr: str, filename: str) -> list[re.Match[str]]:
    out = []
    for line in stderr.splitlines():
        m = ISSUE_LINE.match(line)
        if m and m["file"] == filename:
            out.append(m)
    return out


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 35
    for case in CASES:
        first = case.path.read_bytes().splitlines()[0]
        assert first.startswith(b"# expect: "), f"{case.path.name}: first line must be '# expect: ...'"
        assert case.expects, case.path.name


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.path.stem, marks=[pytest.mark.xfail(reason=c.xfail, strict=True)] if c.xfail else [])
        for c in CASES
    ],
)
def test_bad_spec_is_refused(case: Case) -> None:
    result = corpus_results()[case.path]
    output = result.stdout + result.stderr
    name = rel(case.path)
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    assert result.stdout == "", "problems go to stderr"
    head = result.stderr.splitlines()[0]
    assert head.startswith(f"{name}: ") and "problem(s)" in head, head
    lines = issue_lines(result.stderr, name)
    assert lines, f"no '  {name}[:LINE]: PATH: MESSAGE' line in:\n{result.stderr}"
    count = int(head.split(": ")[1].split()[0])
    assert count == len(lines), result.stderr
    for expect in case.expects:
        matching = [m for m in lines if expect in m.group(0)]
        assert matching, f"{expect!r} is not on any error line of:\n{result.stderr}"
        m = matching[0]
        # An expectation written as "PATH: message" must be about exactly that field.
        wanted = PATH_MESSAGE.match(expect)
        if wanted:
            got = PATH_MESSAGE.match(m["rest"])
            assert got and got["path"] == wanted["path"], m.group(0)
        if case.path.name not in NO_LINE:
            assert m["line"], f"no line number on {m.group(0)!r}"
    # Every problem names the field it is about (or "(top level)" for the whole file).
    for m in lines:
        assert PATH_MESSAGE.match(m["rest"]), f"no field path on {m.group(0)!r}"


@pytest.mark.parametrize("case", [c for c in CASES if not c.xfail], ids=lambda c: c.path.stem)
def test_parse_spec_raises_spec_error_with_the_same_problems(case: Case) -> None:
    """The library gives the same problems as the CLI: a SpecError, never another exception."""
    with pytest.raises(SpecError) as info:
        load_spec(case.path)
    formatted = [issue.format(case.path.name) for issue in info.value.issues]
    for expect in case.expects:
        assert any(expect in line for line in formatted), (expect, formatted)


def test_several_problems_are_all_listed() -> None:
    """Field errors are collected over the whole file, not only the first one."""
    result = corpus_results()[BAD / "many_field_problems.yaml"]
    lines = issue_lines(result.stderr, rel(BAD / "many_field_problems.yaml"))
    assert len(lines) >= 6
    paths = {m["rest"].split(": ")[0] for m in lines}
    assert {
        "cluster.name",
        "ssh.port",
        "versions.driver.version",
        "node_groups[0].hardware.gpu.count",
        "node_groups[0].hardware.gpu.modle",
        "slurm.partitions[0].oversubscribe",
    } <= paths


def test_several_rule_problems_are_all_listed() -> None:
    """Cross-field rules are all run, so one file shows every rule it breaks."""
    result = corpus_results()[BAD / "many_rule_problems.yaml"]
    lines = issue_lines(result.stderr, rel(BAD / "many_rule_problems.yaml"))
    assert len(lines) == 6, result.stderr
    assert result.stderr.splitlines()[0].endswith(": 6 problem(s)")


def test_problems_are_sorted_by_line() -> None:
    result = corpus_results()[BAD / "many_field_problems.yaml"]
    numbers = [int(m["line"]) for m in issue_lines(result.stderr, rel(BAD / "many_field_problems.yaml"))]
    assert numbers == sorted(numbers)


SPEC_WITH_PROBLEMS = """\
cluster:
  name: t
  scheduler: slurm
node_groups:
  - name: ctl
    hosts: ctl1
    roles: [controller, accounting-db]
  - name: cpu
    hosts: cpu[1-4]
    roles: [compute]
    hardware: {sockets: 1, cores_per_socket: 4, threads_per_core: 1, real_memory_mb: 8000}
slurm:
  partitions:
    - name: batch
      nodes: cpu
      qos: gold
    - name: short
      nodes: ctl
"""


def test_rule_errors_carry_line_numbers() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(SPEC_WITH_PROBLEMS, "x.yaml")
    by_path = {i.path: i for i in info.value.issues}
    assert by_path["slurm.partitions[0].qos"].line == 16
    assert by_path["slurm.partitions[1].nodes"].line == 18
    assert by_path["slurm.partitions[0].qos"].format("x.yaml").startswith("x.yaml:16: slurm.partitions[0].qos: ")


def test_field_errors_carry_line_numbers() -> None:
    text = SPEC_WITH_PROBLEMS.replace("  scheduler: slurm", "  scheduler: slurm\n  sheduler: x").replace(
        "    hosts: cpu[1-4]", "    hosts: cpu[4-1]"
    )
    with pytest.raises(SpecError) as info:
        parse_spec(text, "x.yaml")
    by_path = {i.path: i for i in info.value.issues}
    assert by_path["cluster.sheduler"].line == 4
    assert by_path["node_groups[1].hosts"].line == 10
    assert "did you mean 'scheduler'?" in by_path["cluster.sheduler"].message


def test_cli_error_lines_carry_line_numbers() -> None:
    result = corpus_results()[BAD / "switch_cycle.yaml"]
    name = rel(BAD / "switch_cycle.yaml")
    assert f"  {name}:14: topology.switches[0].parent: switch 'spine' is in a cycle" in result.stderr.splitlines()
    assert f"  {name}:15: topology.switches[1].parent: switch 'leaf1' is in a cycle" in result.stderr.splitlines()


def test_yaml_syntax_error_names_the_line() -> None:
    result = corpus_results()[BAD / "yaml_syntax_error.yaml"]
    assert re.search(r"yaml_syntax_error\.yaml:\d+: \(top level\): not valid YAML", result.stderr)


def test_check_json_lists_every_problem() -> None:
    path = BAD / "many_rule_problems.yaml"
    result = run_check("--json", rel(path))
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert len(doc["errors"]) == 6
    by_path = {e["path"]: e for e in doc["errors"]}
    assert by_path["slurm.qos[0].preempt"]["line"] == 23
    assert by_path["slurm.qos[0].preempt"]["message"] == "QOS 'ghost' is not defined in slurm.qos"


def test_missing_file_is_a_spec_error_not_a_traceback(tmp_path: Path) -> None:
    result = run_check(str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "cannot read spec file" in result.stderr


def test_error_lines_are_not_wrapped() -> None:
    """At rich's default 80 columns (stderr not a terminal) each problem stays on one line."""
    path = BAD / "many_field_problems.yaml"
    result = run_check(rel(path))
    text = path.read_text(encoding="utf-8")
    with pytest.raises(SpecError) as info:
        parse_spec(text, rel(path))
    assert result.stderr.splitlines() == info.value.format().splitlines()
