"""Baked images for real: build the lab spec's compute (workers) image, boot 3 nodes from it, converge.

Own labs only: the build's (gfimg, 10.213.21.0/24, inside ``gpuforge image build``) and this test's
(gfimgt, 10.213.22.0/24), both torn down whatever happens. The image is built from spec A; a stock
lab applied from scratch gives the change count to beat; the image lab is planned against A
("image matches spec") and against B (A with a changed Slurm setting: slurm-config differs), then
applied with B: one run, no package transaction and fewer changed operations, validate passes,
a second apply changes nothing.
Two builds of A list the same packages and the same config digests; the image holds no secret
and no identity.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.secrets import SecretStore
from gpuforge.image import strip
from gpuforge.lab import core
from gpuforge.lab.image_base import image_rootfs
from gpuforge.lab.pytest_plugin import Lab
from tests.conftest import LabCluster, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside]  # labs of its own: beside the session lab's tests

NAME, SUBNET, NODES = "gfimgt", "10.213.22.0/24", 3
WORKERS = ("node2", "node3")


@contextlib.contextmanager
def image_lab(image: str | None) -> Iterator[Lab]:
    core.down(NAME, log=lambda m: None)
    try:
        yield Lab(NAME, NODES, SUBNET, core.up(NAME, NODES, SUBNET, log=print, image=image))
    finally:
        core.down(NAME, log=lambda m: None)


def changed(result: dict[str, Any], node: str) -> list[str]:
    return list(result["hosts"][node]["changed"])


def build(cluster: LabCluster, spec: Path, out: Path) -> dict[str, Any]:
    cp = run_cli("image", "build", str(spec), "--group", "workers", "-o", str(out), "--format", "rootfs,oci",
                 env=cluster.env, timeout=1800)  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    manifest: dict[str, Any] = json.loads((out / "image-manifest.json").read_text())
    return manifest


def older_slurm(data: dict[str, Any]) -> None:
    data["slurm"]["partitions"][0]["max_time"] = "2:00:00"


def test_a_cluster_booted_from_a_baked_image_converges_in_one_short_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with image_lab(None) as lab:  # from scratch: the count to beat, and spec A fitted to this lab
        stock = LabCluster(lab, tmp_path, state)
        spec_a, spec_b = stock.spec_path, stock.write("spec-b.yaml", mutate=older_slurm)
        scratch = stock.apply()
        assert scratch["returncode"] == 0 and scratch["ok"], scratch
    first = build(stock, spec_a, tmp_path / "img1")
    second = build(stock, spec_a, tmp_path / "img2")
    assert first["packages"] == second["packages"] and first["configs"] == second["configs"]
    assert first["record"]["layers"] == second["record"]["layers"]
    assert "/etc/slurm/slurm.conf" in first["configs"] and "munge" in first["packages"]

    root = image_rootfs(str(tmp_path / "img1" / "oci"))
    secrets = SecretStore("gflab", state).load()
    assert strip.findings(root, [secrets.munge_key, secrets.slurmdbd_db_password.encode()]) == []

    with image_lab(str(tmp_path / "img1" / "oci")) as lab:
        c = LabCluster(lab, tmp_path, state)
        c.spec_path = spec_a
        for node in WORKERS:  # identity made at boot: own machine-id and host key, not the image's
            assert len(c.ssh(node, "cat /etc/machine-id").strip()) == 32
        assert c.ssh("node2", "cat /etc/machine-id") != c.ssh("node3", "cat /etc/machine-id")
        plan_a = c.plan(spec_a)
        lines = {n: plan_a["hosts"][n]["image"] for n in WORKERS}
        assert all(line.startswith("image matches spec") for line in lines.values()), lines
        plan_b = c.plan(spec_b)
        assert "slurm-config" in plan_b["hosts"]["node2"]["image"], plan_b["hosts"]["node2"]
        result = c.apply(spec_b)
        errors = {n: h["error"] for n, h in result["hosts"].items() if h["error"]}
        assert result["returncode"] == 0 and result["ok"], errors or result
        for node in WORKERS:  # the package transaction (the floor of a first apply) is already done
            assert len(changed(result, node)) < len(changed(scratch, node)), (result, scratch)
            assert any("transaction" in op for op in changed(scratch, node)), changed(scratch, node)
            assert not any("transaction" in op for op in changed(result, node)), changed(result, node)
        report = run_cli("validate", str(spec_b), "--json", env=c.env)
        assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-2000:]
        assert c.ssh("node2", "grep -c '2:00:00' /etc/slurm/slurm.conf").strip() != "0"
        again = c.apply(spec_b)
        assert again["returncode"] == 0 and not any(h["changed"] for h in again["hosts"].values()), again
