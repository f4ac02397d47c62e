"""Review item 9, node-local part: the health check saw a secret-bearing file by owner and mode only,
so ``slurmdbd.conf`` edited on the node (another ``DebugLevel``) left it passing.

Now ``health.json`` lists an ``hmac`` (HMAC-SHA256 under the node's own key, ``health.key``, 0600
root, derived from a cluster key kept in the control host's secrets folder) for every file holding
credentials, never a plain sha256; the node's probe computes it in-process with stdlib ``hmac``; a
mismatch is "content differs", with no digest and no diff. The key never shows in a plan or a
render, and no image keeps it.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpuforge.deploy.secrets import SecretStore
from gpuforge.image import strip
from gpuforge.image.build import secret_values
from gpuforge.orchestrate.plan import plan
from gpuforge.probes import files as probe_files
from gpuforge.render import render_node
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.health import (
    HEALTH_CONFIG,
    HEALTH_KEY,
    HEALTH_PROGRAM,
    HMAC_REDACTED,
    SLURMDBD_CONF,
    holds_credentials,
    node_health_key,
)
from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.model import Spec
from gpuforge.validator import nodelocal as nl
from gpuforge.validator.node.execute import run_node_checks
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec
from tests.validator.vhelpers import lab_spec

CLUSTER_KEY = bytes(range(32))
SECRETS = Secrets(slurmdbd_db_password="dbd-Pa55word-xyz", munge_key=b"M" * 1024, health_key=CLUSTER_KEY)
HEX64 = re.compile(r"[0-9a-f]{64}")


def _node(spec: Spec, name: str):  # type: ignore[no-untyped-def]
    return next(n for n in resolve_nodes(spec) if n.name == name)


# -- the probe -------------------------------------------------------------------------------------


def test_the_probe_keys_with_the_key_files_bytes_in_process_and_in_its_shell_command(tmp_path: Path) -> None:
    key, conf, link = tmp_path / "health.key", tmp_path / "slurmdbd.conf", tmp_path / "link.conf"
    key.write_bytes(b"00" * 32 + b"\n")
    conf.write_text("DebugLevel=info\nStoragePass=x\n")
    link.symlink_to(conf)
    paths = [str(conf), str(tmp_path / "missing"), str(link), str(tmp_path)]
    local = probe_files.read_keyed_digests(paths, str(key))
    want = hmac.new(key.read_bytes(), conf.read_bytes(), hashlib.sha256).hexdigest()
    assert local == [
        f"__hmac={conf}|{want}",
        f"__hmac={tmp_path / 'missing'}|",
        f"__hmac={link}|",
        f"__hmac={tmp_path}|",
    ]
    command = probe_files.keyed_digests_command(paths, str(key))
    assert key.read_text().strip() not in command, "the key is read by path, never on a command line"
    shell = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout
    assert shell.splitlines() == local
    parsed = probe_files.parse_keyed_digests(local)
    assert parsed == {"read": True, "digests": {str(conf): want, paths[1]: None, str(link): None, str(tmp_path): None}}
    key.unlink()
    assert probe_files.read_keyed_digests(paths, str(key)) == [f"__nokey={key}"]
    assert probe_files.parse_keyed_digests([f"__nokey={key}"])["read"] is False


def test_a_huge_file_is_read_only_to_the_limit_and_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_files, "KEYED_READ_LIMIT", 8)
    key, big = tmp_path / "k", tmp_path / "big"
    key.write_bytes(b"k")
    big.write_bytes(b"0123456789" * 3)
    ((line),) = probe_files.read_keyed_digests([str(big)], str(key))
    assert line.endswith(hmac.new(b"k", b"012345678", hashlib.sha256).hexdigest())  # limit + 1 bytes


# -- the render ------------------------------------------------------------------------------------


def test_health_json_carries_an_hmac_never_a_sha256_of_a_secret_bearing_file(tmp_path: Path) -> None:
    spec, _ = lab_spec(tmp_path)
    node = _node(spec, "node1")
    files = {f.path: f for f in render_node(spec, node, SECRETS)}
    health, key_file = files[HEALTH_CONFIG], files[HEALTH_KEY]
    key = node_health_key(CLUSTER_KEY, "node1")
    assert key_file.data == key and key_file.secret and (key_file.mode, key_file.owner) == ("0600", "root")
    assert health.mode == "0600" and health.keyed
    doc = json.loads(health.data)
    assert doc["hmac_key"] == HEALTH_KEY
    entries = {e["path"]: e for e in doc["config_files"]}
    credentials = [f for f in files.values() if f.path in entries and holds_credentials(f)]
    assert {f.path for f in credentials} >= {SLURMDBD_CONF, "/etc/munge/munge.key"}
    for f in credentials:
        assert entries[f.path]["sha256"] is None, f.path
        assert entries[f.path]["hmac"] == hmac.new(key, f.data, hashlib.sha256).hexdigest(), f.path
        assert hashlib.sha256(f.data).hexdigest() not in health.data.decode(), f.path
    plain = [e for e in entries.values() if e["sha256"]]
    assert plain and all(e["hmac"] is None for e in plain)
    shown = health.shown.decode()  # as plans and diffs show it: its keyed digests hidden
    assert HMAC_REDACTED in shown and not any(e["hmac"] in shown for e in entries.values() if e["hmac"])
    assert node_health_key(CLUSTER_KEY, "node2") != key, "each node its own key"


def test_without_the_real_secrets_the_render_holds_placeholders_only(tmp_path: Path) -> None:
    spec, _ = lab_spec(tmp_path)
    files = {f.path: f for f in render_node(spec, _node(spec, "node1"))}
    entries = {e["path"]: e for e in json.loads(files[HEALTH_CONFIG].data)["config_files"]}
    assert entries[SLURMDBD_CONF]["hmac"] == HMAC_REDACTED
    assert b"gpuforge secrets store" in files[HEALTH_KEY].data


# -- the node's check: the reproducer --------------------------------------------------------------


def _materialise(root: Path, rendered: dict[str, RenderedFile], doc: dict[str, Any]) -> dict[str, Any]:
    """The node as apply left it, under ``root``: the listed files holding credentials and the key,
    with the config's paths moved there (owner and group as this user has them)."""
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], capture_output=True, text=True, check=True).stdout.strip()
    listed = []
    for e in doc["config_files"]:
        if not e["hmac"]:
            continue
        local = root / e["path"].lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(rendered[e["path"]].data)
        local.chmod(int(e["mode"], 8))
        listed.append(e | {"path": str(local), "owner": user, "group": group})
    key = root / HEALTH_KEY.lstrip("/")
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(rendered[HEALTH_KEY].data)
    key.chmod(0o600)
    return doc | {"config_files": listed, "hmac_key": str(key)}


@pytest.mark.parametrize("program", ["module", "built"])
def test_a_changed_debuglevel_in_slurmdbd_conf_drains_the_node(tmp_path: Path, program: str) -> None:
    """The reproducer, with the health program itself (the module, and the one file the node gets):
    slurmdbd.conf as apply wrote it passes; one changed line fails with "content differs", no digest
    and no diff; the key gone fails too."""
    spec, _ = lab_spec(tmp_path)
    rendered = {f.path: f for f in render_node(spec, _node(spec, "node1"), SECRETS)}
    cfg = _materialise(tmp_path / "node", rendered, json.loads(rendered[HEALTH_CONFIG].data))
    cfg_path = tmp_path / "health.json"
    cfg_path.write_text(json.dumps(cfg))
    path = nl.__file__
    if program == "built":
        path = str(tmp_path / "gpuforge-health")
        Path(path).write_bytes(rendered[HEALTH_PROGRAM].data)
    cmd = [sys.executable, "-I", path, "--config", str(cfg_path), "--checks", "config.files_intact", "--json"]

    def run() -> dict[str, Any]:
        env = {**os.environ, "GPUFORGE_NODE_PROGRAM_CACHE": "off"}  # no compiled-module cache on this machine
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        (result,) = [r for r in json.loads(cp.stdout)["results"] if r["id"] == "config.files_intact"]
        return result  # type: ignore[no-any-return]

    assert run()["status"] == "pass"
    dbd = tmp_path / "node" / SLURMDBD_CONF.lstrip("/")
    text = dbd.read_text()
    edited = (
        re.sub(r"DebugLevel=\S+", "DebugLevel=debug5", text) if "DebugLevel=" in text else text + "DebugLevel=debug5\n"
    )
    dbd.write_text(edited)  # as the review did: one line of slurmdbd.conf changed by hand
    result = run()
    assert result["status"] == "fail"
    assert result["message"] == f"changed by hand: {dbd} content differs"
    assert not HEX64.search(result["message"]) and SECRETS.slurmdbd_db_password not in result["message"]
    dbd.write_text(text)
    assert run()["status"] == "pass"
    Path(cfg["hmac_key"]).unlink()
    result = run()
    assert result["status"] == "fail" and result["message"].startswith(f"changed by hand: {cfg['hmac_key']} unreadable")


def test_the_check_compares_the_hmac_not_the_owner_and_mode_alone(tmp_path: Path) -> None:
    conf, key = tmp_path / "slurmdbd.conf", tmp_path / "health.key"
    conf.write_text("DebugLevel=info\n")
    key.write_bytes(b"k" * 65)
    user, group = (subprocess.run(["stat", "-c", f, str(conf)], capture_output=True, text=True).stdout.strip()
                   for f in ("%U", "%G"))  # fmt: skip
    mac = hmac.new(key.read_bytes(), b"DebugLevel=debug5\n", hashlib.sha256).hexdigest()
    entry = {"path": str(conf), "sha256": None, "hmac": mac, "mode": f"{conf.stat().st_mode & 0o7777:04o}",
             "owner": user, "group": group}  # fmt: skip
    cfg = {"node": "node1", "config_files": [entry], "hmac_key": str(key)}
    (result,) = run_node_checks(cfg, ["config.files_intact"], health_only=True)[0]
    assert (result.status, result.message) == ("fail", f"changed by hand: {conf} content differs")
    conf.write_text("DebugLevel=debug5\n")
    (result,) = run_node_checks(cfg, ["config.files_intact"], health_only=True)[0]
    assert result.status == "pass", result.message


# -- never shown, never in an image ----------------------------------------------------------------


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return simulated(monkeypatch, tmp_path)


def test_a_plan_never_shows_the_key_or_a_keyed_digest(tmp_path: Path, cluster: SimulatedCluster) -> None:
    import yaml

    from tests.conftest import REPO

    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    spec_file = write_simulated_spec(data, tmp_path, "h100.yaml")
    from gpuforge.deploy import context

    context._secrets.cache_clear()  # the deploys' secrets of this test's state folder, not an earlier test's
    old_mac = "ab" * 32  # the node's copy from an earlier apply: its digests hidden in the diff too
    cluster.respond(r"cat .*/etc/gpuforge/health\.json", ["{", f'  "hmac": "{old_mac}",', "}"])
    result = plan(load_cluster(spec_file), limit="ctl01")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    result.print(console)
    shown = console.file.getvalue() + json.dumps(result.as_dict())  # type: ignore[attr-defined]
    sec = SecretStore("h100").load()
    assert sec.health_key is not None
    from gpuforge.spec import load_spec

    spec = load_spec(spec_file)
    node = _node(spec, "ctl01")
    real = {f.path: f for f in render_node(spec, node, sec)}
    key = node_health_key(sec.health_key, "ctl01")
    macs = [e["hmac"] for e in json.loads(real[HEALTH_CONFIG].data)["config_files"] if e["hmac"]]
    assert macs and HEALTH_KEY in shown and HMAC_REDACTED in shown, "the config's diff is shown, its digests hidden"
    for hidden in (key.decode().strip(), sec.health_key.hex(), old_mac, *macs):
        assert hidden not in shown


def test_no_image_keeps_the_health_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    spec, _ = lab_spec(tmp_path)
    tree = tmp_path / "tree"
    (tree / "etc/gpuforge").mkdir(parents=True)
    node = _node(spec, "node2")
    values = secret_values(spec, [node])
    sec = SecretStore(spec.cluster.name).load()
    assert sec.health_key is not None and sec.health_key in values
    key = node_health_key(sec.health_key, node.name)
    (tree / "etc/gpuforge/health.key").write_bytes(key)
    (tree / "etc/gpuforge/copy").write_bytes(b"x" + key)  # a copy elsewhere is found by its bytes
    found = {f.path for f in strip.findings(str(tree), values)}
    assert found == {"etc/gpuforge/health.key", "etc/gpuforge/copy"}
    strip.strip_tree(str(tree))
    assert not (tree / "etc/gpuforge/health.key").exists()
    assert os.path.exists(tree / "etc/gpuforge/copy")  # not a rule's path: the build's check refuses it


def test_validate_compares_health_json_with_the_stored_secrets_and_never_shows_its_digests(tmp_path: Path) -> None:
    """``validate``'s config layer: health.json is compared with its rendering under the secrets
    apply stored (a diff of it shows its keyed digests hidden), or by owner and mode without them."""
    from gpuforge.validator.config_drift import expected_files, shown_text

    spec, _ = lab_spec(tmp_path)
    node = _node(spec, "node1")
    real = {f.path: f for f in render_node(spec, node, SECRETS)}
    (health,) = [e for e in expected_files(spec, node, SECRETS) if e.path == HEALTH_CONFIG]
    assert health.sha256 == hashlib.sha256(real[HEALTH_CONFIG].data).hexdigest()
    macs = [e["hmac"] for e in json.loads(real[HEALTH_CONFIG].data)["config_files"] if e["hmac"]]
    assert health.text is not None and HMAC_REDACTED in health.text and not any(m in health.text for m in macs)
    node_copy = real[HEALTH_CONFIG].data.decode()
    assert macs and not any(m in shown_text(node_copy, health.redact) for m in macs), "the node's side hidden too"
    older = Secrets(SECRETS.slurmdbd_db_password, SECRETS.munge_key)  # stored by a gpuforge without a health key
    for secrets in (older, None):
        (health,) = [e for e in expected_files(spec, node, secrets) if e.path == HEALTH_CONFIG]
        assert (health.sha256, health.text) == (None, None)
