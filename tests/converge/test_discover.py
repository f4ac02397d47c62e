"""gpuforge discover: one round trip per node, facts merged into <spec>.hardware.json, hostile nodes contained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.orchestrate import discover as discover_mod
from gpuforge.orchestrate.discover import MAX_ANSWER_BYTES, discover, printable
from gpuforge.probes.hardware import HARDWARE_COMMAND
from gpuforge.render.slurm import node_lines
from gpuforge.spec import load_spec, parse_spec
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.nodes import Node
from gpuforge.validator.runner import Completed
from tests import yaml_text
from tests.facts.test_hardware_probe import hgx
from tests.spec.test_hardware import spec_data


class Nodes:
    """A Transport whose nodes answer from ``answers`` (node -> (rc, stdout, stderr)); records commands."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str]] = []

    def run(self, node: Node, command: str, stdin: bytes | None = None, timeout: float = 60) -> Completed:
        self.sent.append((node.name, command))
        rc, out, err = self.answers[node.name]
        return Completed(rc, out, err, 0.1)


HGX_OUT = "\n".join(hgx()) + "\n"
SMALL_OUT = "\n".join(
    json.loads((Path(__file__).parents[1] / "facts" / "fixtures" / "platform" / "hardware_vm_2cpu.json").read_text())[
        "output"
    ]
)


def write_spec(tmp_path: Path, gpu_hw: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data(gpu_hw if gpu_hw is not None else {"discover": True})))
    return path


def everyone(answer: tuple[int, str, str]) -> dict[str, tuple[int, str, str]]:
    return {n: answer for n in ("ctl1", "login1", "gpu1", "gpu2")}


def test_discover_reads_each_node_once_and_render_uses_the_facts(tmp_path: Path) -> None:
    path = write_spec(tmp_path)
    nodes = Nodes(everyone((0, HGX_OUT, "")))
    result = discover(Cluster.of(parse_spec(path.read_text(), str(path)), path), transport=nodes)
    assert result.ok and sorted(result.facts) == ["ctl1", "gpu1", "gpu2", "login1"]
    assert sorted(n for n, _ in nodes.sent) == ["ctl1", "gpu1", "gpu2", "login1"]
    assert {c for _, c in nodes.sent} == {HARDWARE_COMMAND}
    doc = json.loads((tmp_path / "cluster.hardware.json").read_text())
    assert doc["format"] == 1 and doc["cluster"] == "t" and doc["nodes"]["gpu1"]["gpus"] == {"2330": 8}
    assert result.changes[0].startswith(
        "ctl1: new (2 x 56 cores x 2 threads, 2063760 MiB, 2 NUMA node(s), 8 x 10de:2330"
    )
    assert node_lines(load_spec(path)) == [
        "NodeName=gpu[1-2] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2022484 "
        "Gres=gpu:h100:8 Feature=gpu State=UNKNOWN"
    ]


def test_a_second_run_prints_what_changed_and_limit_keeps_the_rest(tmp_path: Path) -> None:
    path = write_spec(tmp_path)
    spec = parse_spec(path.read_text(), str(path))
    discover(Cluster.of(spec, path), transport=Nodes(everyone((0, HGX_OUT, ""))))
    smaller = HGX_OUT.replace("MemTotal:       2113290240 kB", "MemTotal:       1056645120 kB")
    again = discover(Cluster.of(spec, path), limit="gpu2", transport=Nodes({"gpu2": (0, smaller, "")}))
    assert again.changes == ["gpu2: memory_mb 2063760 -> 1031880"]
    doc = json.loads((tmp_path / "cluster.hardware.json").read_text())
    assert doc["nodes"]["gpu1"]["memory_mb"] == 2063760 and doc["nodes"]["gpu2"]["memory_mb"] == 1031880
    assert load_spec(path).node_groups[2].hardware.real_memory_mb == 1031880 * 98 // 100


def test_stated_figures_that_the_node_does_not_have_are_reported(tmp_path: Path) -> None:
    path = write_spec(
        tmp_path, {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "real_memory_mb": 2100000}
    )
    result = discover(
        Cluster.of(parse_spec(path.read_text(), str(path)), path),
        limit="gpu1",
        transport=Nodes({"gpu1": (0, SMALL_OUT, "")}),
    )
    mismatches = [c for c in result.changes if "the spec says" in c]
    assert mismatches == [
        "gpu1: the spec says sockets 2, the node has 1",
        "gpu1: the spec says cores_per_socket 56, the node has 2",
        "gpu1: the spec says threads_per_core 2, the node has 1",
        "gpu1: the spec says real_memory_mb 2100000, the node has 24105 MiB (Slurm would mark it INVALID: at most "
        "23622 leaves the 2% margin)",
    ]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ((255, "", "ssh: connect to host gpu1 port 22: Connection refused"), "unreachable: "),
        ((0, "x" * (MAX_ANSWER_BYTES + 1), ""), "answered more than 256 KiB"),
        ((0, "__section=cpu\n\x1b]0;owned\x07cpu0 1 0 0\n", ""), "cannot read its hardware: "),
        ((0, "", ""), "cannot read its hardware: "),
    ],
)
def test_a_node_that_cannot_be_read_is_an_error_of_that_node_only(
    tmp_path: Path, answer: tuple[int, str, str], error: str
) -> None:
    path = write_spec(tmp_path)
    answers = everyone((0, HGX_OUT, "")) | {"gpu1": answer}
    result = discover(Cluster.of(parse_spec(path.read_text(), str(path)), path), transport=Nodes(answers))
    assert list(result.errors) == ["gpu1"] and result.errors["gpu1"].startswith(error)
    assert "\x1b" not in result.errors["gpu1"] and "\x07" not in result.errors["gpu1"]
    assert "gpu1" not in json.loads((tmp_path / "cluster.hardware.json").read_text())["nodes"]


def test_printable_strips_control_characters() -> None:
    assert printable("a\x1b[31mb\x07\nc\td") == "a[31mb c d"
    assert printable("y" * 400).endswith("...") and len(printable("y" * 400)) == 303


def test_the_command_writes_the_file_and_exits_1_when_a_node_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_spec(tmp_path)
    answers = everyone((0, HGX_OUT, "")) | {"login1": (124, "", "")}
    monkeypatch.setattr(discover_mod, "SshTransport", lambda *a, **k: Nodes(answers))
    out = CliRunner().invoke(app, ["discover", str(path)])
    assert out.exit_code == 1, out.output
    assert "login1: unreachable" in out.output and "3 node(s) read, 1 not" in " ".join(out.output.split())
    assert load_spec(path).node_groups[2].hardware.sockets == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "nosuch"], "'nosuch' matches no node of the spec"),
        ([], "cannot read spec file"),
    ],
)
def test_bad_input_exits_2_without_a_traceback(tmp_path: Path, args: list[str], message: str) -> None:
    path = write_spec(tmp_path) if args else tmp_path / "missing.yaml"
    out = CliRunner().invoke(app, ["discover", str(path), *args])
    assert out.exit_code == 2 and message in out.output and "Traceback" not in out.output
