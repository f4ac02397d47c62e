"""The node-side key check (``gpuforge.render.key_check``) against gpg's own reading of the same keys,
and the pinned fingerprints (``gpuforge.spec.repo_keys``) against their citations.

The check runs as the nodes run it (``sh -c`` with ``python3``): it passes only a file holding
exactly the pinned primary key, armored or binary, with or without subkeys; anything else exits 1
and the key is never moved into place.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuforge.bundle.signing import dearmor, primary_fingerprints
from gpuforge.render.key_check import key_check_command
from gpuforge.spec import Spec, k8s_upstream, parse_spec
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.repo_keys import MIRROR_SETTING, repository_fingerprint, upstream_fingerprint
from tests import yaml_text
from tests.conftest import REPO


class Keys:
    """Keys made by gpg in a private home: ed25519 (sign only) and RSA with an encryption subkey."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(mode=0o700)
        self.gpg("--quick-gen-key", "ed <ed@example.org>", "ed25519", "sign", "never")
        self.gpg("--quick-gen-key", "rsa <rsa@example.org>", "rsa2048", "default", "never")

    def gpg(self, *args: str) -> bytes:
        env = {**os.environ, "GNUPGHOME": str(self.home)}
        cmd = ["gpg", "--batch", "--quiet", "--passphrase", "", "--pinentry-mode", "loopback", *args]
        return subprocess.run(cmd, env=env, check=True, capture_output=True).stdout

    def export(self, who: str, armor: bool) -> bytes:
        return self.gpg(*(["--armor"] if armor else []), "--export", who)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    k = Keys(tmp_path_factory.mktemp("keys") / "home")
    yield k
    subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(k.home)}, check=False)


def check(tmp_path: Path, data: bytes, fingerprint: str) -> subprocess.CompletedProcess[str]:
    key = tmp_path / "key.part"
    key.write_bytes(data)
    return subprocess.run(["sh", "-c", key_check_command(str(key), fingerprint)], capture_output=True, text=True)


@pytest.mark.parametrize("who", ["ed@example.org", "rsa@example.org"])
@pytest.mark.parametrize("armor", [True, False], ids=["armored", "binary"])
def test_the_pinned_key_passes_as_gpg_reads_it(keys: Keys, tmp_path: Path, who: str, armor: bool) -> None:
    data = keys.export(who, armor)
    [fingerprint] = primary_fingerprints(data)  # gpg --show-keys, the subkey not counted
    assert check(tmp_path, data, fingerprint).returncode == 0


def test_another_key_a_second_key_or_no_key_is_refused(keys: Keys, tmp_path: Path) -> None:
    ed, rsa = keys.export("ed@example.org", True), keys.export("rsa@example.org", False)
    [ed_fpr] = primary_fingerprints(ed)
    [rsa_fpr] = primary_fingerprints(rsa)
    refused = check(tmp_path, rsa, ed_fpr)
    assert refused.returncode == 1 and f"key {rsa_fpr}, not the pinned {ed_fpr}: refused" in refused.stderr
    both = dearmor(ed) + rsa  # the pinned key and another beside it: apt would trust either
    assert primary_fingerprints(both) == [ed_fpr, rsa_fpr]
    refused = check(tmp_path, both, ed_fpr)
    assert refused.returncode == 1 and f"key {ed_fpr}, {rsa_fpr}, not the pinned" in refused.stderr
    for garbage in (b"", b"<html>404</html>", b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n"):
        refused = check(tmp_path, garbage, ed_fpr)
        assert refused.returncode == 1 and ("refused" in refused.stderr or "not a readable" in refused.stderr)
    missing = subprocess.run(["sh", "-c", key_check_command(str(tmp_path / "nothing"), ed_fpr)], capture_output=True)
    assert missing.returncode == 1


def test_cited_fingerprints_are_in_their_citations() -> None:
    """Each pinned upstream fingerprint is the one its citation quotes (spaces as the source prints them)."""
    cited = {
        ("nvidia-cuda", True): table.SOURCES["cuda-repo-key"],
        ("nvidia-container", True): table.SOURCES["container-repo-key"],
        ("nvidia-cuda", False): table.SOURCES["cuda-rpm-key"],
        ("nvidia-container", False): table.SOURCES["container-repo-key"],
        ("docker-ce", False): table.SOURCES["docker-rhel-key"],
        ("epel", False): table.SOURCES["epel9-key"],
        ("kubernetes", True): k8s_upstream.SOURCES["pkgs-k8s-io-key"],
        ("kubernetes", False): k8s_upstream.SOURCES["pkgs-k8s-io-key"],
    }
    for (kind, deb), citation in cited.items():
        fingerprint = upstream_fingerprint(kind, deb)
        assert fingerprint is not None and len(fingerprint) == 40, kind
        assert fingerprint in citation.section.replace(" ", ""), (kind, deb)


def spec(mode: str, **sources: object) -> Spec:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"] = {"mode": mode, **sources}
    return parse_spec(yaml_text.dump(data))


def test_each_mode_pins_its_key() -> None:
    own = "0123456789ABCDEF0123456789ABCDEF01234567"
    upstream = spec("upstream")
    mirror = spec("mirror", mirrors={"nvidia_cuda": "http://m.example.org/cuda"})
    resigned = spec("mirror", mirrors={"nvidia_cuda": "http://m.example.org/cuda"}, mirror_keys={"nvidia_cuda": own})
    offline = spec("offline", bundle_dir="/srv/bundle", bundle_fingerprint=own)
    for kind in MIRROR_SETTING:
        for deb in (True, False):
            want = upstream_fingerprint(kind, deb)
            assert repository_fingerprint(upstream, kind, deb) == want
            assert repository_fingerprint(mirror, kind, deb) == want
            assert repository_fingerprint(offline, kind, deb) is None
    assert repository_fingerprint(resigned, "nvidia-cuda", True) == own
    assert repository_fingerprint(resigned, "nvidia-cuda", False) == own
    assert repository_fingerprint(resigned, "nvidia-container", True) == table.APT_REPO_FINGERPRINTS["nvidia-container"]


def test_a_second_armored_block_is_read_and_refused(keys: Keys, tmp_path: Path) -> None:
    """The review's reproducer: the pinned key's armored block, then a second block with another key.
    gpg (so apt's keyring) takes both; the check used to read the first block only and passed it."""
    ed, rsa = keys.export("ed@example.org", True), keys.export("rsa@example.org", True)
    [ed_fpr], [rsa_fpr] = primary_fingerprints(ed), primary_fingerprints(rsa)
    served = ed + rsa
    assert primary_fingerprints(served) == [ed_fpr, rsa_fpr]  # what gpg imports from it
    refused = check(tmp_path, served, ed_fpr)
    assert refused.returncode == 1 and f"key {ed_fpr}, {rsa_fpr}, not the pinned {ed_fpr}: refused" in refused.stderr
    for smuggled in (
        ed + dearmor(rsa),
        ed + b"\nplain text after the block\n",
        ed + b"-----BEGIN PGP SIGNATURE-----\n",
    ):
        refused = check(tmp_path, smuggled, ed_fpr)
        assert refused.returncode == 1, smuggled[-40:]
    unended = ed.replace(b"-----END PGP PUBLIC KEY BLOCK-----", b"")
    assert check(tmp_path, unended, ed_fpr).returncode == 1
    assert check(tmp_path, ed + b"\n" + b" " * (1 << 20), ed_fpr).returncode == 1  # over 1 MiB: not read


def test_a_multi_key_file_passes_only_with_exactly_its_pinned_keys(keys: Keys, tmp_path: Path) -> None:
    """dnf's key files may hold several keys (one block each): all pinned and nothing else passes."""
    ed, rsa = keys.export("ed@example.org", True), keys.export("rsa@example.org", True)
    [ed_fpr], [rsa_fpr] = primary_fingerprints(ed), primary_fingerprints(rsa)
    for data in (ed + rsa, rsa + b"\n" + ed, dearmor(ed) + dearmor(rsa)):
        assert check_pins(tmp_path, data, ed_fpr, rsa_fpr).returncode == 0
    assert check_pins(tmp_path, ed, ed_fpr, rsa_fpr).returncode == 1  # one pinned key missing
    third = "0123456789ABCDEF0123456789ABCDEF01234567"
    assert check_pins(tmp_path, ed + rsa, ed_fpr, third).returncode == 1
    with pytest.raises(ValueError):
        key_check_command("key.part")


def test_packets_that_are_not_a_public_key_are_refused(keys: Keys, tmp_path: Path) -> None:
    """A secret key packet (tag 5) or a compressed packet (tag 8) beside the pinned key: refused."""
    ed = dearmor(keys.export("ed@example.org", False))
    [ed_fpr] = primary_fingerprints(ed)
    for tag in (5, 8, 11):
        packet = bytes([0xC0 | tag, 3]) + b"abc"
        refused = check(tmp_path, ed + packet, ed_fpr)
        assert refused.returncode == 1 and f"tag {tag}" in refused.stderr


def check_pins(tmp_path: Path, data: bytes, *fingerprints: str) -> subprocess.CompletedProcess[str]:
    key = tmp_path / "multi.part"
    key.write_bytes(data)
    cmd = key_check_command(str(key), *fingerprints)
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
