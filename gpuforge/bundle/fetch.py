"""Downloads: verified by checksum into the bundle's partial directory, renamed into place."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import lzma
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuforge.bundle.debian import Stanza
from gpuforge.bundle.layout import CHUNK, INDEX_SUMS


class FetchError(Exception):
    """A download that did not produce a verified file."""

    def __init__(self, url: str, reason: str, unreachable: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.unreachable = unreachable


#: Index file names a flat repository may serve, preferred first.
INDEX_NAMES = ("Packages.gz", "Packages.xz", "Packages")
#: The most an index, Release file or key may weigh.
SMALL_LIMIT = 256 << 20


_NET_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)


def _describe(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"unreachable: {e.reason}"
    return f"{type(e).__name__}: {e}"


class Fetcher:
    """HTTP(S)/file downloads with a timeout; a host found unreachable is not tried again."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.dead: dict[str, str] = {}  # host -> why

    def open(self, url: str) -> Any:
        host = urllib.parse.urlsplit(url).netloc
        if host in self.dead:
            raise FetchError(url, self.dead[host], unreachable=True)
        req = urllib.request.Request(url, headers={"User-Agent": "gpuforge-bundle"})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raise FetchError(url, _describe(e)) from None
        except _NET_ERRORS as e:
            if host:
                self.dead[host] = _describe(e)
            raise FetchError(url, _describe(e), unreachable=True) from None

    def index(self, base: str) -> tuple[str, str, bytes]:
        """(URL, file name, bytes as served) of a flat repository's ``Packages`` index
        (``.gz``, ``.xz`` or plain); ``decode_index`` gives its text."""
        last: FetchError | None = None
        for name in INDEX_NAMES:
            url = f"{base.rstrip('/')}/{name}"
            try:
                return url, name, self.small(url)
            except FetchError as e:
                if e.unreachable:
                    raise
                last = e
        assert last is not None
        raise FetchError(f"{base.rstrip('/')}/Packages", f"no Packages index ({last.reason})")

    def small(self, url: str, limit: int = SMALL_LIMIT) -> bytes:
        """A whole file of at most ``limit`` bytes (indexes, Release files, keys)."""
        try:
            with self.open(url) as r:
                data: bytes = r.read(limit + 1)
        except _NET_ERRORS as e:
            raise FetchError(url, _describe(e)) from None
        if len(data) > limit:
            raise FetchError(url, f"larger than {limit} bytes")
        return data

    def download(self, url: str, dest: Path, partial: Path, expect: dict[str, str], size: int | None) -> str:
        """Fetch ``url`` to ``dest`` through a temp file in ``partial``; its sha256.

        ``expect`` maps hashlib names to published checksums: the file is renamed into place
        only when they and ``size`` match. Nothing is left behind on failure.
        """
        partial.mkdir(parents=True, exist_ok=True)
        tmp = partial / f"{dest.name}.{os.getpid()}.part"
        hs = {a: hashlib.new(a) for a in {"sha256", *expect}}
        got = 0
        try:
            with self.open(url) as r, tmp.open("wb") as f:
                while chunk := r.read(CHUNK):
                    f.write(chunk)
                    got += len(chunk)
                    for h in hs.values():
                        h.update(chunk)
            if size is not None and got != size:
                raise FetchError(url, f"{got} bytes, the index says {size}")
            for algo, want in expect.items():
                if hs[algo].hexdigest() != want.lower():
                    raise FetchError(url, f"{algo} {hs[algo].hexdigest()} does not match the published {want}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
        except _NET_ERRORS as e:
            raise FetchError(url, _describe(e)) from None
        finally:
            tmp.unlink(missing_ok=True)
        return hs["sha256"].hexdigest()


def decode_index(url: str, name: str, data: bytes) -> str:
    """The text of an index file as served (decompressed by its name)."""
    try:
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        elif name.endswith(".xz"):
            data = lzma.decompress(data)
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise FetchError(url, f"unreadable index: {_describe(e)}") from None
    return data.decode("utf-8", "replace")


def hash_file(path: Path, algos: Iterable[str]) -> dict[str, str]:
    hs = {a: hashlib.new(a) for a in algos}
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            for h in hs.values():
                h.update(chunk)
    return {a: h.hexdigest() for a, h in hs.items()}


def index_sums(s: Stanza) -> dict[str, str]:
    """Published checksums of a stanza's file: SHA256 and the strongest other one."""
    sums = {algo: s.get(f).split()[0] for f, algo in INDEX_SUMS if s.get(f).strip()}
    keep = {k: v for k, v in sums.items() if k == "sha256"}
    for _, algo in INDEX_SUMS:
        if algo in sums:
            keep[algo] = sums[algo]
            break
    return keep
