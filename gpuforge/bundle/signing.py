"""OpenPGP for the bundle: upstream ``InRelease`` checked at build time, the bundle's own signed.

Build time: a repository's ``InRelease`` (or ``Release`` + ``Release.gpg``) is checked with
``gpgv`` against the repository's key; only the text gpgv says is signed is read, and the
``Packages`` index fetched must have the size and SHA256 that text gives. The packages then
carry the index's checksums: upstream key -> index -> every ``.deb``.

The bundle's own repositories are signed with a key made for that build (``BundleSigner``):
its private half lives in a 0700 directory removed when the build ends, never stored; nodes
get the public half (``apt/gpuforge-bundle.gpg``) and use ``signed-by`` instead of
``[trusted=yes]``. A key is trusted only once it is the pinned one (``pinned_key_problem``: the
file holds exactly one primary key, of the pinned fingerprint), never for being in the bundle.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from debian.deb822 import Release

#: Where the bundle's public key is, relative to the bundle (binary keyring: apt's gpgv reads no armor).
BUNDLE_KEY = "apt/gpuforge-bundle.gpg"
#: The same key ASCII-armored for dnf (``gpgkey=file://...``), beside the rpm repositories.
BUNDLE_RPM_KEY = "rpm/gpuforge-bundle.asc"
RELEASE = "InRelease"
_GPG_TIMEOUT = 60.0
_BAD_STATUS = ("BADSIG", "ERRSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG", "NO_PUBKEY")


class SignatureError(Exception):
    """A signature that does not verify, or a key or tool that is missing."""


@dataclass(frozen=True)
class Signed:
    """The text a signature covers and the primary key fingerprint that made it."""

    text: str
    fingerprint: str


def gpg_tools_missing() -> list[str]:
    """The OpenPGP programs ``gpuforge bundle`` needs that are not on PATH."""
    return [t for t in ("gpg", "gpgv", "gpgconf") if shutil.which(t) is None]


def dearmor(data: bytes) -> bytes:
    """A binary OpenPGP key from an ASCII-armored one (binary input is returned as it is).

    RFC 4880 section 6: header lines, a blank line, base64, then ``=CRC`` and the END line.
    """
    text = data.decode("ascii", "replace")
    if "-----BEGIN PGP" not in text:
        return data
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP"))
    body: list[str] = []
    in_headers = True
    for line in lines[start + 1 :]:
        line = line.strip()
        if line.startswith("-----END PGP"):
            break
        if in_headers:
            if not line:
                in_headers = False
            elif ":" not in line:  # no headers at all: this is base64 already
                in_headers = False
                body.append(line)
            continue
        if line.startswith("=") and len(line) == 5:
            continue  # the CRC24 checksum line
        body.append(line)
    try:
        return base64.b64decode("".join(body), validate=True)
    except ValueError as e:
        raise SignatureError(f"the key is not valid ASCII armor ({e})") from None


def _gpgv(keyring: bytes, args: list[str], files: dict[str, bytes]) -> tuple[list[str], bytes]:
    """Run gpgv on ``files`` (written to a private temp dir) with ``keyring``: (status lines, output)."""
    with tempfile.TemporaryDirectory(prefix="gpuforge-gpgv-") as tmp:
        d = Path(tmp)
        (d / "keyring.gpg").write_bytes(dearmor(keyring))
        for name, data in files.items():
            (d / name).write_bytes(data)
        out = d / "signed"
        output = ["--output", str(out)] if len(args) == 1 else []  # clear-signed: keep what is signed
        cmd = ["gpgv", "--status-fd", "1", "--keyring", str(d / "keyring.gpg"), *output, *args]
        try:
            r = subprocess.run(cmd, cwd=d, capture_output=True, timeout=_GPG_TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SignatureError("gpgv is not installed (apt-get install gpgv)") from None
        except subprocess.TimeoutExpired:
            raise SignatureError(f"gpgv did not finish in {_GPG_TIMEOUT:.0f} s") from None
        status = [
            line.removeprefix("[GNUPG:] ")
            for line in r.stdout.decode("utf-8", "replace").splitlines()
            if line.startswith("[GNUPG:] ")
        ]
        bad = [s for s in status if s.split(" ", 1)[0] in _BAD_STATUS]
        if r.returncode != 0 or bad or not any(s.startswith("GOODSIG ") for s in status):
            why = bad[0].split(" ", 1)[0] if bad else f"gpgv exit {r.returncode}"
            raise SignatureError(f"the signature does not verify with the repository key ({why})")
        signed = out.read_bytes() if out.exists() else b""
        return status, signed


def _valid_fingerprint(status: list[str]) -> str:
    for s in status:
        if s.startswith("VALIDSIG "):
            fields = s.split()
            return fields[-1].upper()  # the primary key's fingerprint (gpg's doc/DETAILS)
    raise SignatureError("gpgv reported no valid signature")


def primary_fingerprints(key: bytes) -> list[str]:
    """The primary key fingerprints of a key file (armored or binary), as gpg reads it.

    ``gpg --show-keys`` in a throw-away home: nothing is imported into any keyring. The
    colon listing gives each primary key as a ``pub`` record followed by its ``fpr`` record
    (gpg's doc/DETAILS); subkeys (``sub``) are not primary keys. Raises SignatureError when
    gpg cannot read the file as keys.
    """
    with tempfile.TemporaryDirectory(prefix="gpuforge-keys-") as home:
        cmd = ["gpg", "--batch", "--no-tty", "--homedir", home, "--with-colons", "--show-keys"]
        try:
            r = subprocess.run(
                cmd, input=key, capture_output=True, timeout=_GPG_TIMEOUT, env={**os.environ, "LC_ALL": "C"}
            )
        except FileNotFoundError:
            raise SignatureError("gpg is not installed (apt-get install gnupg)") from None
        except subprocess.TimeoutExpired:
            raise SignatureError(f"gpg did not finish in {_GPG_TIMEOUT:.0f} s") from None
    if r.returncode != 0:
        raise SignatureError("the key file holds no OpenPGP key gpg can read")
    found: list[str] = []
    record = ""
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        fields = line.split(":")
        if fields[0] == "fpr" and record == "pub" and len(fields) > 9:
            found.append(fields[9].upper())
        record = fields[0] if fields[0] != "fpr" else ""
    return found


def pinned_key_problem(key: bytes, fingerprint: str) -> str | None:
    """Why ``key`` is not exactly the pinned key (None: it holds one primary key, ``fingerprint``).

    Checked before the key is trusted for anything: a key file with a second key beside the
    pinned one is refused too, since gpgv would accept either's signatures.
    """
    try:
        found = primary_fingerprints(key)
    except SignatureError as e:
        return str(e)
    if found != [fingerprint]:
        return f"holds key {', '.join(found) or '(none)'}, not the pinned {fingerprint}"
    return None


def verify_pinned(data: bytes, signature: bytes, key: bytes, fingerprint: str) -> None:
    """Raise SignatureError unless ``signature`` is a valid detached signature of ``data`` made by
    the key pinned by ``fingerprint`` (``key`` must hold that key and no other)."""
    problem = pinned_key_problem(key, fingerprint)
    if problem is not None:
        raise SignatureError(problem)
    signed = verify_detached(data, signature, key)
    if signed.fingerprint != fingerprint:
        raise SignatureError(f"signed by key {signed.fingerprint}, not by the pinned {fingerprint}")


def verify_inrelease(inrelease: bytes, keyring: bytes) -> Signed:
    """The text of a clear-signed ``InRelease`` that ``keyring`` signed."""
    status, signed = _gpgv(keyring, ["InRelease"], {"InRelease": inrelease})
    return Signed(signed.decode("utf-8", "replace"), _valid_fingerprint(status))


def verify_detached(release: bytes, signature: bytes, keyring: bytes) -> Signed:
    """``Release`` checked against its detached ``Release.gpg``."""
    status, _ = _gpgv(keyring, ["Release.gpg", "Release"], {"Release": release, "Release.gpg": signature})
    return Signed(release.decode("utf-8", "replace"), _valid_fingerprint(status))


def release_sums(text: str) -> dict[str, tuple[str, int]]:
    """name -> (sha256, size) from a Release text's ``SHA256`` field (python-debian's parser)."""
    out: dict[str, tuple[str, int]] = {}
    for entry in Release(text).get("SHA256", []):
        try:
            out[entry["name"]] = (entry["sha256"].lower(), int(entry["size"]))
        except (KeyError, ValueError):
            continue
    return out


def check_index(signed: Signed, name: str, data: bytes) -> None:
    """``data`` (the index file ``name`` as fetched) must be what the signed Release lists."""
    sums = release_sums(signed.text)
    if name not in sums:
        raise SignatureError(f"the signed Release does not list {name}")
    sha, size = sums[name]
    got = hashlib.sha256(data).hexdigest()
    if len(data) != size or got != sha:
        raise SignatureError(f"{name} does not match the signed Release (sha256 {got}, {len(data)} bytes)")


#: apt needs a Date and refuses one in the node's future: a fixed past one, since the bundle may
#: reach nodes whose clocks are not set yet (nothing in it expires: no Valid-Until).
RELEASE_DATE = "Sat, 01 Jan 2000 00:00:00 UTC"


def release_text(label: str, files: dict[str, bytes]) -> str:
    """A flat repository's Release: what apt needs to check each index."""
    lines = ["Origin: gpuforge", f"Label: {label}", f"Date: {RELEASE_DATE}", "SHA256:"]
    for name in sorted(files):
        lines.append(f" {hashlib.sha256(files[name]).hexdigest()} {len(files[name]):>10} {name}")
    return "\n".join(lines) + "\n"


def inrelease_problem(out: Path, repo: str, keyring: bytes) -> str | None:
    """Why ``out/repo/InRelease`` does not vouch for ``out/repo/Packages`` under ``keyring`` (None: it does)."""
    inrelease = out / repo / RELEASE
    if not inrelease.is_file():
        return "missing (the repository is not signed)"
    try:
        signed = verify_inrelease(inrelease.read_bytes(), keyring)
    except SignatureError as e:
        return str(e)
    if signed.text != release_text(repo, {"Packages": (out / repo / "Packages").read_bytes()}):
        return f"does not cover {repo}/Packages as it is"
    return None


class BundleSigner:
    """A signing key made for one bundle build; its secret half is gone when the ``with`` ends.

    The key home is a 0700 temp directory (gpg's agent is stopped before it is removed).
    """

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self.home = ""

    def __enter__(self) -> BundleSigner:
        self.home = tempfile.mkdtemp(prefix="gpuforge-sign-")  # mode 0700
        try:
            self._gpg(["--quick-gen-key", self.user_id, "ed25519", "sign", "never"])
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if not self.home:
            return
        subprocess.run(
            ["gpgconf", "--homedir", self.home, "--kill", "all"],
            capture_output=True,
            timeout=_GPG_TIMEOUT,
            check=False,
            env=self._env(),
        )
        shutil.rmtree(self.home, ignore_errors=True)
        self.home = ""

    def _env(self) -> dict[str, str]:
        return {**os.environ, "GNUPGHOME": self.home, "LC_ALL": "C"}

    def _gpg(self, args: list[str], data: bytes | None = None) -> bytes:
        cmd = ["gpg", "--batch", "--no-tty", "--quiet", "--passphrase", "", "--pinentry-mode", "loopback", *args]
        try:
            r = subprocess.run(cmd, input=data, capture_output=True, timeout=_GPG_TIMEOUT, env=self._env())
        except FileNotFoundError:
            raise SignatureError("gpg is not installed (apt-get install gnupg)") from None
        except subprocess.TimeoutExpired:
            raise SignatureError(f"gpg did not finish in {_GPG_TIMEOUT:.0f} s") from None
        if r.returncode != 0:
            last = r.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            raise SignatureError(f"gpg {args[0]}: {last[0]}")
        return r.stdout

    def public_key(self) -> bytes:
        """The public key as a binary keyring (what ``signed-by`` names)."""
        return self._gpg(["--export"])

    def fingerprint(self) -> str:
        """The primary key fingerprint of the key made for this build."""
        [fingerprint] = primary_fingerprints(self.public_key())
        return fingerprint

    def public_key_armored(self) -> bytes:
        """The public key ASCII-armored (what dnf's ``gpgkey=`` imports)."""
        return self._gpg(["--armor", "--export"])

    def detach_sign(self, data: bytes) -> bytes:
        """An ASCII-armored detached signature of ``data`` (an rpm-md ``repomd.xml.asc``), SHA-512."""
        return self._gpg(["--digest-algo", "SHA512", "--armor", "--detach-sign"], data)

    def clearsign(self, text: str) -> bytes:
        """``text`` clear-signed (an ``InRelease``), SHA-512."""
        return self._gpg(["--digest-algo", "SHA512", "--clearsign"], text.encode())
