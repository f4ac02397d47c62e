"""config.files: validate fails a node whose managed files are not what the spec renders, naming the
node and the file, with a unified diff for a non-secret file and never a secret's content.

The node answers through FakeCluster (vhelpers): a converged node's files are exactly the rendered
ones; each test changes one node's files in place, as a hand edit would."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.nodes import Node
from gpuforge.validator.node.base import FAIL, PASS
from gpuforge.validator.runner import validate

from .vhelpers import FakeCluster, lab_spec

SLURM_CONF = "/etc/slurm/slurm.conf"
MUNGE_KEY = "/etc/munge/munge.key"
SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"


@pytest.fixture
def lab(tmp_path: Path) -> tuple[Any, Path, FakeCluster]:
    spec, path = lab_spec(tmp_path)
    return spec, path, FakeCluster(spec)


def node_named(spec: Any, name: str) -> Node:
    return next(n for n in resolve_nodes(spec) if n.name == name)


def edit(fake: FakeCluster, node_name: str, path: str, text: str | None = None, mode: str | None = None) -> None:
    files = fake.node_files(node_named(fake.spec, node_name))
    sha, old_mode, owner, group, old_text = files[path]
    if text is not None:
        sha, old_text = hashlib.sha256(text.encode()).hexdigest(), text
    files[path] = (sha, mode or old_mode, owner, group, old_text)


def config_result(fake: FakeCluster, spec: Any, path: Path, node: str) -> tuple[str, str]:
    report = validate(Cluster.of(spec, path), checks="config", transport=fake)
    r = next(c for n in report.nodes if n.name == node for c in n.checks if c.id == "config.files")
    return r.status, r.message


def test_a_converged_node_passes(lab: Any) -> None:
    spec, path, fake = lab
    status, message = config_result(fake, spec, path, "node2")
    assert status == PASS
    assert message.startswith("all ") and message.endswith(" managed files match the spec (content, owner, mode)")


def test_a_hand_edited_slurm_conf_fails_with_a_diff(lab: Any) -> None:
    spec, path, fake = lab
    text = fake.node_files(node_named(spec, "node2"))[SLURM_CONF][4] or ""
    edit(fake, "node2", SLURM_CONF, text + "SchedulerType=sched/builtin\n")
    report = validate(Cluster.of(spec, path), checks="config", transport=fake)
    assert report.exit_code == 1
    by = {n.name: {c.id: c for c in n.checks} for n in report.nodes}
    assert by["node1"]["config.files"].status == PASS and by["node3"]["config.files"].status == PASS
    result = by["node2"]["config.files"]
    assert result.status == FAIL
    first, *diff = result.message.splitlines()
    assert first.startswith("1 of ") and first.endswith(f"{SLURM_CONF}: content differs")
    assert diff[:2] == [f"--- {SLURM_CONF} (on the node)", f"+++ {SLURM_CONF} (from the spec)"]
    assert "-SchedulerType=sched/builtin" in diff  # the node's line, not the spec's


def test_a_changed_mode_and_a_missing_file_are_named(lab: Any) -> None:
    spec, path, fake = lab
    edit(fake, "node3", SLURM_CONF, mode="666")
    node3 = node_named(spec, "node3")
    gone = sorted(p for p in fake.node_files(node3) if p != SLURM_CONF)[0]
    del fake.node_files(node3)[gone]
    status, message = config_result(fake, spec, path, "node3")
    assert status == FAIL
    assert f"{SLURM_CONF}: mode 0666, want 0644" in message and f"{gone}: missing" in message
    assert "---" not in message  # no content changed: no diff


def test_a_secret_is_compared_by_mode_and_never_shown(lab: Any) -> None:
    spec, path, fake = lab
    edit(fake, "node1", MUNGE_KEY, text="a different key\n", mode="644")
    status, message = config_result(fake, spec, path, "node1")
    assert status == FAIL
    assert message.splitlines() == [
        f"1 of {message.split(' of ', 1)[1].split(' ', 1)[0]} managed files differ from the spec "
        f"(gpuforge apply restores them): {MUNGE_KEY}: mode 0644, want 0400"
    ]
    assert "different key" not in message


#: Review item 3: the node's Alertmanager config holds an older webhook URL with its own password.
NODE_PASSWORD, NODE_TOKEN, SPEC_PASSWORD = "0ldpassw0rd", "0LDTOKEN", "s3cretpass"


def with_webhook(data: dict[str, Any]) -> None:
    url = f"https://alertuser:{SPEC_PASSWORD}@hooks.example.org/services/T0/B0PATH"
    data["monitoring"]["receivers"] = [{"name": "ops", "webhook_url": url}]


def test_a_drift_diff_hides_the_nodes_credentials_in_every_format(tmp_path: Path) -> None:
    from gpuforge.render.monitoring import ALERTMANAGER_CONFIG

    spec, path = lab_spec(tmp_path, with_webhook)
    fake = FakeCluster(spec)
    text = fake.node_files(node_named(spec, "node1"))[ALERTMANAGER_CONFIG][4] or ""
    old = f"https://olduser:{NODE_PASSWORD}@hooks.example.org/old/{NODE_TOKEN}?token=qu3ry"
    edit(fake, "node1", ALERTMANAGER_CONFIG, text.replace("https://", f"{old}\n#https://", 1) + "x: 1\n")
    report = validate(Cluster.of(spec, path), checks="config", transport=fake)
    result = next(c for n in report.nodes if n.name == "node1" for c in n.checks if c.id == "config.files")
    assert result.status == FAIL and f"--- {ALERTMANAGER_CONFIG} (on the node)" in result.message
    assert "+x: 1" not in result.message and "-x: 1" in result.message  # the diff is there
    shown = [result.message, report.to_json(), report.to_junit(), report.to_prometheus()]
    for out in shown:
        for secret in (NODE_PASSWORD, NODE_TOKEN, SPEC_PASSWORD, "olduser:", "qu3ry"):
            assert secret not in out, f"{secret!r} is shown:\n{out}"


def test_a_secret_bearing_file_edited_on_the_node_is_content_differs_without_a_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review item 9: slurmdbd.conf edited on the node (another DebugLevel) was invisible: secrets
    were compared by owner and mode only. With the secrets apply stored on this control host, their
    content is compared too (digests in memory), and the message says so without a diff."""
    from gpuforge.deploy.secrets import SecretStore
    from gpuforge.render import render_node

    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    spec, path = lab_spec(tmp_path)
    secrets = SecretStore(spec.cluster.name).load()  # what apply made and wrote to the nodes
    fake = FakeCluster(spec)
    node1 = node_named(spec, "node1")
    files = fake.node_files(node1)
    real = {f.path: f for f in render_node(spec, node1, secrets) if f.secret or f.keyed}
    for p, f in real.items():  # the node as apply left it: the real secrets in its files (and health.json's HMACs)
        files[p] = (hashlib.sha256(f.data).hexdigest(), *files[p][1:4], None)
    assert config_result(fake, spec, path, "node1")[0] == PASS
    dbd = real[SLURMDBD_CONF].data.decode()
    edited = (
        dbd.replace("DebugLevel=info", "DebugLevel=debug5") if "DebugLevel=" in dbd else dbd + "DebugLevel=debug5\n"
    )
    files[SLURMDBD_CONF] = (hashlib.sha256(edited.encode()).hexdigest(), *files[SLURMDBD_CONF][1:4], None)
    status, message = config_result(fake, spec, path, "node1")
    assert status == FAIL and message.splitlines()[0].endswith(f"{SLURMDBD_CONF}: content differs"), message
    assert len(message.splitlines()) == 1, "no diff of a secret-bearing file"
    assert secrets.slurmdbd_db_password not in message and "debug5" not in message
