"""The bundle's trust is anchored outside it: a bundle folder anyone can write cannot vouch for itself.

The attack: replace a file in the bundle, rewrite ``manifest.json`` to match, and re-sign it
with a key of one's own (put in the bundle in place of, or beside, the bundle key). Verified
against the fingerprint the operator pinned when the bundle was made, every variant fails and
says why; the unchanged bundle passes; a wrong pin fails; and plan/apply in offline mode refuse
before any host is touched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpuforge.bundle.layout import MANIFEST, MANIFEST_SIG
from gpuforge.bundle.signing import BUNDLE_KEY, BundleSigner
from gpuforge.bundle.verify import verify_bundle
from tests import yaml_text
from tests.bundle.conftest import run_bundle
from tests.conftest import REPO, run_cli
from tests.helpers import bundle_fingerprint, write_bundle_manifest

ENROOT = "artifacts/enroot_4.1.2-1_amd64.deb"
PACKAGES = "apt/nvidia-container/Packages"


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, str]:
    """A signed test bundle and the fingerprint the operator recorded when it was made."""
    b = tmp_path / "bundle"
    (b / "apt" / "nvidia-container").mkdir(parents=True)
    (b / PACKAGES).write_text("Package: nvidia-container-toolkit\nVersion: 1.20.0-1\n")
    (b / "artifacts").mkdir()
    (b / ENROOT).write_bytes(b"the enroot package gpuforge fetched")
    write_bundle_manifest(b)
    return b, bundle_fingerprint(b)


def replace_artifact(b: Path) -> None:
    """Another enroot package of the same size in place of the one fetched."""
    (b / ENROOT).write_bytes(b"the enroot package attacker brought")


def relist(b: Path) -> bytes:
    """manifest.json rewritten to list every file as it is now (what the attacker does next)."""
    data = json.loads((b / MANIFEST).read_text())
    for entry in data["files"]:
        body = (b / entry["path"]).read_bytes()
        entry["size"], entry["sha256"] = len(body), hashlib.sha256(body).hexdigest()
    raw = json.dumps(data).encode()
    (b / MANIFEST).write_bytes(raw)
    return raw


def resign_with_own_key(b: Path, keep_pinned_key: bool) -> None:
    """The attacker's key signs the rewritten manifest; it replaces the bundle key (or is added
    beside it, so that the pinned key is still there)."""
    with BundleSigner("attacker") as attacker:
        own = attacker.public_key()
        (b / BUNDLE_KEY).write_bytes((b / BUNDLE_KEY).read_bytes() + own if keep_pinned_key else own)
        (b / MANIFEST_SIG).write_bytes(attacker.detach_sign(relist(b)))


def _artifact_only(b: Path) -> None:
    replace_artifact(b)


def _manifest_rewritten(b: Path) -> None:
    replace_artifact(b)
    relist(b)


def _resigned_with_a_new_key(b: Path) -> None:
    replace_artifact(b)
    resign_with_own_key(b, keep_pinned_key=False)


def _new_key_added_beside_the_pinned_one(b: Path) -> None:
    replace_artifact(b)
    resign_with_own_key(b, keep_pinned_key=True)


def _signature_removed(b: Path) -> None:
    replace_artifact(b)
    relist(b)
    (b / MANIFEST_SIG).unlink()


@pytest.mark.parametrize(
    ("attack", "expected"),
    [
        (_artifact_only, f"{ENROOT}: sha256 differs from the manifest"),
        (_manifest_rewritten, "manifest.json.asc: the manifest is not signed by the pinned bundle key"),
        (_resigned_with_a_new_key, "manifest.json.asc: the manifest is not signed by the pinned bundle key"),
        (_new_key_added_beside_the_pinned_one, "manifest.json.asc: the manifest is not signed by the pinned"),
        (_signature_removed, "manifest.json.asc: cannot read it as a regular file"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_a_changed_bundle_fails_against_the_pinned_key(
    bundle: tuple[Path, str], attack: Callable[[Path], None], expected: str
) -> None:
    b, pin = bundle
    attack(b)
    problems = verify_bundle(b, pin)
    assert problems and any(expected in p for p in problems), problems


def test_the_problem_names_the_keys(bundle: tuple[Path, str]) -> None:
    b, pin = bundle
    _resigned_with_a_new_key(b)
    [problem] = verify_bundle(b, pin)
    assert f"not the pinned {pin}" in problem and "re-signed" in problem
    found = problem.split("holds key ", 1)[1].split(", not the pinned")[0]
    assert len(found) == 40 and found != pin  # the key found is the attacker's, and only it


def test_a_second_key_beside_the_pinned_one_is_named(bundle: tuple[Path, str]) -> None:
    b, pin = bundle
    _new_key_added_beside_the_pinned_one(b)
    [problem] = verify_bundle(b, pin)
    found = problem.split("holds key ", 1)[1].split(", not the pinned")[0].split(", ")
    assert len(found) == 2 and found[0] == pin and found[1] != pin


def test_the_unchanged_bundle_passes_and_a_wrong_pin_fails(bundle: tuple[Path, str]) -> None:
    b, pin = bundle
    assert verify_bundle(b, pin) == []
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    [problem] = verify_bundle(b, other)
    assert f"holds key {pin}, not the pinned {other}" in problem


def test_cli_verify_with_the_pin(bundle: tuple[Path, str], tmp_path: Path) -> None:
    b, pin = bundle
    cp = run_bundle("--verify", str(b), "--fingerprint", pin.lower())  # as typed: any case
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"OK (signed by {pin})" in cp.stdout
    spaced = " ".join(pin[i : i + 4] for i in range(0, 40, 4))  # as gpg prints it
    assert run_bundle("--verify", str(b), "--fingerprint", spaced).returncode == 0
    spec = offline_spec_file(tmp_path, b, pin)  # the pin the spec holds
    cp = run_bundle(str(spec), "--verify", str(b))
    assert cp.returncode == 0 and f"OK (signed by {pin})" in cp.stdout, cp.stdout + cp.stderr
    _resigned_with_a_new_key(b)
    cp = run_bundle("--verify", str(b), "--fingerprint", pin)
    assert cp.returncode == 1 and "OK" not in cp.stdout
    assert "the manifest is not signed by the pinned bundle key" in cp.stderr
    cp = run_bundle("--verify", str(b))  # the bundle's own word is not asked for
    assert cp.returncode == 2 and "--verify needs --fingerprint FPR" in cp.stderr


def offline_spec_file(tmp_path: Path, b: Path, pin: str | None) -> Path:
    """slurm-h100 in offline mode on ``b``, with ``pin`` as sources.bundle_fingerprint."""
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"] = {"mode": "offline", "bundle_dir": str(b)}
    if pin is not None:
        data["sources"]["bundle_fingerprint"] = pin
    spec = tmp_path / "offline.yaml"
    spec.write_text(yaml_text.dump(data))
    return spec


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_plan_and_apply_refuse_a_resigned_bundle_before_any_host(
    bundle: tuple[Path, str], tmp_path: Path, command: str
) -> None:
    b, pin = bundle
    _resigned_with_a_new_key(b)
    spec = offline_spec_file(tmp_path, b, pin)
    cp = run_cli(
        command,
        *(["--yes"] if command == "apply" else []),
        str(spec),
        env={"GPUFORGE_STATE_DIR": str(tmp_path / "state")},
    )
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "sources.bundle_dir: bundle" in cp.stderr
    assert "the manifest is not signed by the pinned bundle key" in cp.stderr
    assert "Traceback" not in cp.stderr
    assert not (tmp_path / "state" / "applied").exists()  # nothing was applied or recorded


@pytest.mark.parametrize("command", ["check", "plan", "apply"])
def test_offline_mode_without_a_pin_is_refused(bundle: tuple[Path, str], tmp_path: Path, command: str) -> None:
    b, _ = bundle
    spec = offline_spec_file(tmp_path, b, None)
    cp = run_cli(command, str(spec), env={"GPUFORGE_STATE_DIR": str(tmp_path / "state")})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "sources.bundle_fingerprint: mode offline needs bundle_fingerprint" in cp.stderr
    assert not (tmp_path / "state" / "applied").exists()
