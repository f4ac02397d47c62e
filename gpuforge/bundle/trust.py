"""The bundle's chain of trust: upstream's signed index in, the bundle's own signature out.

In: ``signed_index`` fetches a flat repository's ``Packages`` index only together with its
``InRelease`` (or ``Release`` + ``Release.gpg``) and the repository key, checks the signature
(and, from upstream, the key's cited fingerprint) and the index's SHA256 against the signed
text. Every repository key must first be exactly the key pinned for it (``need.fingerprint``:
upstream's cited fingerprint, or the one the spec pins for a re-signing mirror), a key served
beside a mirror is never trusted for being there. Out: ``sign_repositories`` writes each bundled
repository's ``InRelease`` signed by a key made for the build and the public key at
``apt/gpuforge-bundle.gpg``; ``signed_by_pinned_key`` says when a re-run may keep both as they
are (the key is the operator's pinned one and nothing it covers changed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuforge.bundle.downloads import RepoNeed
from gpuforge.bundle.fetch import Fetcher, FetchError, decode_index
from gpuforge.bundle.layout import MANIFEST, MANIFEST_SIG
from gpuforge.bundle.rpmmd import REPOMD, REPOMD_SIG
from gpuforge.bundle.signing import (
    BUNDLE_KEY,
    BUNDLE_RPM_KEY,
    RELEASE,
    BundleSigner,
    SignatureError,
    Signed,
    check_index,
    inrelease_problem,
    pinned_key_problem,
    release_text,
    verify_detached,
    verify_inrelease,
    verify_pinned,
)


class UntrustedIndex(Exception):
    """An index that is not signed, or not by the repository's key, or not what was signed."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True)
class VerifiedIndex:
    """A Packages index whose signature and checksum were checked."""

    url: str
    text: str
    fingerprint: str
    key_url: str


def _signed_release(fetcher: Fetcher, base: str, keyring: bytes) -> Signed:
    """``InRelease``, else ``Release`` with ``Release.gpg``, verified with ``keyring``."""
    try:
        inrelease = fetcher.small(f"{base}/InRelease")
    except FetchError as e:
        if e.unreachable:
            raise
        try:
            release = fetcher.small(f"{base}/Release")
            detached = fetcher.small(f"{base}/Release.gpg")
        except FetchError as e2:
            if e2.unreachable:
                raise
            raise UntrustedIndex(
                f"{base}/InRelease", "the repository publishes no InRelease nor Release.gpg: it is not signed"
            ) from None
        return verify_detached(release, detached, keyring)
    return verify_inrelease(inrelease, keyring)


def repository_key(fetcher: Fetcher, need: RepoNeed, keys: dict[str, bytes]) -> tuple[str, str, bytes]:
    """(the repository's base URL, its key's URL, the key file); ``keys`` caches key files by URL.

    The key file must hold exactly the key pinned for the repository (``need.fingerprint``:
    upstream's cited one, or a mirror's pinned one) before it checks anything: a key served
    beside a mirror is not trusted for being there. Raises FetchError, or UntrustedIndex when
    no key is known or pinned for the repository, or the key is not the pinned one.
    """
    assert need.url is not None
    base = need.url.rstrip("/")
    if need.key_url is None:
        raise UntrustedIndex(base, "no signing key is known for this repository")
    if need.fingerprint is None:
        raise UntrustedIndex(need.key_url, "no fingerprint is pinned for this repository's key")
    if need.key_url not in keys:
        keys[need.key_url] = fetcher.small(need.key_url, 1 << 20)
    problem = pinned_key_problem(keys[need.key_url], need.fingerprint)
    if problem is not None:
        raise UntrustedIndex(need.key_url, f"the repository key file {problem}")
    return base, need.key_url, keys[need.key_url]


def _require_signer(signed: Signed, need: RepoNeed) -> None:
    if need.fingerprint is not None and signed.fingerprint != need.fingerprint:
        raise SignatureError(f"signed by key {signed.fingerprint}, not by the repository's key {need.fingerprint}")


def signed_index(fetcher: Fetcher, need: RepoNeed, keys: dict[str, bytes]) -> VerifiedIndex:
    """The repository's Packages index, read only once its signature and checksum check out.

    ``keys`` caches key files by URL. Raises FetchError (not fetched) or UntrustedIndex.
    """
    base, key_url, key = repository_key(fetcher, need, keys)
    try:
        signed = _signed_release(fetcher, base, key)
        _require_signer(signed, need)
        url, name, data = fetcher.index(base)
        check_index(signed, name, data)
    except SignatureError as e:
        raise UntrustedIndex(f"{base}/InRelease", f"{e} (key {key_url})") from None
    return VerifiedIndex(url, decode_index(url, name, data), signed.fingerprint, key_url)


def signed_repomd(fetcher: Fetcher, need: RepoNeed, keys: dict[str, bytes]) -> VerifiedIndex:
    """An rpm-md repository's ``repodata/repomd.xml``, read only once ``repomd.xml.asc`` verifies
    with the repository key (and, from upstream, its cited fingerprint). Raises FetchError or
    UntrustedIndex; ``text`` is repomd.xml."""
    base, key_url, key = repository_key(fetcher, need, keys)
    url = f"{base}/{REPOMD}"
    data = fetcher.small(url)
    try:
        signature = fetcher.small(f"{base}/{REPOMD_SIG}", 1 << 20)
    except FetchError as e:
        if e.unreachable:
            raise
        raise UntrustedIndex(f"{base}/{REPOMD_SIG}", "missing: the repository's metadata is not signed") from None
    try:
        signed = verify_detached(data, signature, key)
        _require_signer(signed, need)
    except SignatureError as e:
        raise UntrustedIndex(f"{base}/{REPOMD_SIG}", f"{e} (key {key_url})") from None
    return VerifiedIndex(url, data.decode("utf-8", "replace"), signed.fingerprint, key_url)


def repomd_problem(out: Path, repo: str, keyring: bytes) -> str | None:
    """Why ``out/repo/repodata/repomd.xml.asc`` does not vouch for repomd.xml under ``keyring`` (None: it does)."""
    sig = out / repo / REPOMD_SIG
    if not sig.is_file():
        return "missing (the repository is not signed)"
    try:
        verify_detached((out / repo / REPOMD).read_bytes(), sig.read_bytes(), keyring)
    except (OSError, SignatureError) as e:
        return str(e)
    return None


def _current(out: Path, repos: list[str], rpm_repos: list[str]) -> bool:
    """Do the keys and every repository's signature still cover the indexes beside them?"""
    key = out / BUNDLE_KEY
    if not key.is_file() or (rpm_repos and not (out / BUNDLE_RPM_KEY).is_file()):
        return False
    keyring = key.read_bytes()
    return all(inrelease_problem(out, path, keyring) is None for path in repos) and all(
        repomd_problem(out, path, keyring) is None for path in rpm_repos
    )


def signed_by_pinned_key(out: Path, repos: list[str], rpm_repos: list[str], fingerprint: str | None) -> bool:
    """May a build keep the bundle's key and repository signatures as they are?

    Only when the key is the one the operator pinned (``fingerprint``) and its signatures still
    cover the indexes: a key someone else put in the bundle is never kept, whatever it signed.
    """
    key = out / BUNDLE_KEY
    if fingerprint is None or not key.is_file():
        return False
    return pinned_key_problem(key.read_bytes(), fingerprint) is None and _current(out, repos, rpm_repos)


def manifest_signed_by(out: Path, fingerprint: str) -> bool:
    """Does ``manifest.json.asc`` verify ``manifest.json`` with the pinned bundle key?"""
    try:
        verify_pinned(
            (out / MANIFEST).read_bytes(),
            (out / MANIFEST_SIG).read_bytes(),
            (out / BUNDLE_KEY).read_bytes(),
            fingerprint,
        )
    except (OSError, SignatureError):
        return False
    return True


def sign_repositories(
    signer: BundleSigner,
    out: Path,
    repos: list[str],
    write: Callable[[str, bytes], object],
    rpm_repos: list[str] | None = None,
) -> None:
    """Write the bundle key and sign every bundled repository with ``signer``'s key: apt
    (``apt/<kind>`` with a ``Packages``: ``InRelease``) and rpm-md (``rpm/<kind>``:
    ``repodata/repomd.xml.asc``).

    ``write(rel, data)`` writes one bundle file atomically. The key is written even with no
    repository: it also signs the manifest. Raises SignatureError when gpg cannot sign.
    """
    rpms = list(rpm_repos or [])
    write(BUNDLE_KEY, signer.public_key())
    if rpms:
        write(BUNDLE_RPM_KEY, signer.public_key_armored())
    for path in repos:
        text = release_text(path, {"Packages": (out / path / "Packages").read_bytes()})
        write(f"{path}/{RELEASE}", signer.clearsign(text))
    for path in rpms:
        write(f"{path}/{REPOMD_SIG}", signer.detach_sign((out / path / REPOMD).read_bytes()))
