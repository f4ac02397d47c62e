"""health_config, the health deploy's layer, and the CLI glue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.layers.health import health_layer
from gpuforge.render import node_health_config
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_KEY, HEALTH_PROGRAM, wants_health
from gpuforge.render.node_program import node_program as health_program
from gpuforge.spec import resolve_nodes
from gpuforge.validator import cli
from gpuforge.validator.node.execute import run_node_checks
from gpuforge.validator.node.framework import NODE_CHECKS

from .vhelpers import INVENTORIES, FakeCluster, lab_spec, node, nvidia_gpus_on_this_machine, spec_from


def test_gpu_node_config_from_the_h100_spec() -> None:
    spec = spec_from(INVENTORIES / "slurm-h100.yaml")
    cfg = node_health_config(spec, node(spec, "gpu061"))
    assert cfg["node"] == "gpu061" and cfg["cluster"] == "hopper"
    assert cfg["gpu"] == {"count": 8, "model": "H100-80GB", "gres_type": "h100",
                          "pci_device_ids": ["2330", "2331", "2322", "2324"], "nvswitch": True,
                          "ecc_expected": True}  # fmt: skip
    assert cfg["driver_version"] == "580.173.02"
    assert cfg["mig"] == {
        "config": "inference",
        "file": "/etc/nvidia-mig-manager/gpuforge.yaml",
        "profiles": ["1g.10gb", "2g.20gb", "3g.40gb"],  # what mig.configs.inference names
    }
    assert cfg["container"]["engine"] == "containerd" and cfg["container"]["toolkit_on_host"]
    assert cfg["slurm"]["compute"] and not cfg["slurm"]["controller"]
    ctl = node_health_config(spec, node(spec, "ctl01"))
    assert ctl["gpu"] is None and ctl["driver_version"] is None and ctl["container"] is None
    assert ctl["slurm"]["controller"]
    db = node_health_config(spec, node(spec, "db01"))
    assert db["slurm"]["accounting_db"]
    json.dumps(cfg)


def test_k8s_node_config() -> None:
    spec = spec_from(INVENTORIES / "k8s-gpu-operator.yaml")
    for n in resolve_nodes(spec):
        cfg = node_health_config(spec, n)
        assert cfg["slurm"] is None and cfg["kubernetes"] is not None
        if n.hardware.gpu:
            assert cfg["gpu"]["count"] == n.hardware.gpu.count


def test_every_config_runs_the_checks_without_crashing() -> None:
    """Each example node's config gates the checks without touching probes for checks that do not apply."""
    for inv in ("lab.yaml", "slurm-h100.yaml", "k8s-gpu-operator.yaml"):
        spec = spec_from(INVENTORIES / inv)
        for n in resolve_nodes(spec):
            cfg = node_health_config(spec, n)
            for c in NODE_CHECKS:
                if c.gate:
                    reason = c.gate(cfg)
                    assert reason is None or isinstance(reason, str)


def test_health_layer_installs_program_and_config(tmp_path: Path) -> None:
    spec, _ = lab_spec(tmp_path)
    n2 = node(spec, "node2")
    assert wants_health(spec, n2)
    layer = health_layer(spec, n2)
    files = {f.path: f for f in layer.files}
    assert files[HEALTH_PROGRAM].mode == "0755" and files[HEALTH_PROGRAM].data == health_program()
    assert files[HEALTH_PROGRAM].data.startswith(b"#!/usr/bin/env python3\n")
    assert json.loads(files[HEALTH_CONFIG].data) == node_health_config(spec, n2)
    steps, changed = plan_layer(layer, LayerFacts())
    assert changed == {HEALTH_PROGRAM, HEALTH_CONFIG, HEALTH_KEY}
    assert [s.kind for s in steps] == ["directory", "upload", "upload", "upload"]
    assert files[HEALTH_KEY].secret and files[HEALTH_KEY].mode == "0600"
    k8s = spec_from(INVENTORIES / "k8s-gpu-operator.yaml")
    assert not any(wants_health(k8s, n) for n in resolve_nodes(k8s))


def test_health_program_checks_its_installed_config(tmp_path: Path) -> None:
    """The installed pair works: the program reads the config the layer wrote."""
    spec, _ = lab_spec(tmp_path)
    layer = health_layer(spec, node(spec, "node3"))
    cfg = json.loads(next(f for f in layer.files if f.path == HEALTH_CONFIG).data)
    results, _ = run_node_checks(cfg, ["hardware.gpu_count"])
    assert results[0].status == ("skip" if nvidia_gpus_on_this_machine() == 0 else "fail"), results[0]


def test_validate_cmd_bad_spec_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {name: Bad Name, scheduler: slurm}\nnode_groups: []\n")
    assert cli.validate_cmd(bad, False, None, None, None, None) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "cluster.name" in err


def test_validate_cmd_unknown_check_and_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, path = lab_spec(tmp_path)
    assert cli.validate_cmd(path, False, None, None, None, "nope.nothing") == 2
    assert "unknown check 'nope.nothing'" in capsys.readouterr().err
    assert cli.validate_cmd(path, False, None, None, "gpu[1-2]", None) == 2
    assert "--limit: 'gpu[1-2]' matches no node of the spec; node groups: ctl, workers" in capsys.readouterr().err


def test_validate_cmd_writes_every_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    spec, path = lab_spec(tmp_path)
    fake = FakeCluster(spec)
    fake.sinfo["node2"][0] = "drained"
    from gpuforge.validator import runner

    monkeypatch.setattr(runner, "SshTransport", lambda c, options=(): fake)
    junit, prom = tmp_path / "r.xml", tmp_path / "r.prom"
    assert cli.validate_cmd(path, True, junit, prom, None, None) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["failures"][0]["node"] == "node2"
    assert junit.read_text().startswith('<?xml version="1.0" encoding="UTF-8"?>')
    assert "gpuforge_check_status" in prom.read_text()
    fake.sinfo["node2"][0] = "idle"
    assert cli.validate_cmd(path, False, None, None, None, None) == 0
    assert "OK:" in capsys.readouterr().out


def test_health_cmd_runs_nodelocal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "health.json"
    cfg.write_text(json.dumps({"node": "x", "gpu": None}))
    assert cli.health_cmd(cfg, False) == 0
    assert "x: " in capsys.readouterr().out
    assert cli.health_cmd(tmp_path / "missing.json", False) == 2
