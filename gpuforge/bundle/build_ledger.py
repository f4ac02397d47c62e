"""The bundle build's running state: files written so far, what is missing, the previous manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpuforge.bundle.fetch import Fetcher, FetchError, hash_file
from gpuforge.bundle.layout import MANIFEST, PARTIAL, Log
from gpuforge.spec.bounded_read import InputFileError, read_regular_file
from gpuforge.spec.limits import BUNDLE_MANIFEST_BYTES


class Builder:
    def __init__(self, out: Path, fetcher: Fetcher, log: Log) -> None:
        self.out = out
        self.partial = out / PARTIAL
        self.fetcher = fetcher
        self.log = log
        self.files: dict[str, dict[str, Any]] = {}
        self.missing: list[dict[str, Any]] = []
        self.downloaded = 0
        self.reused = 0
        self.keys: dict[str, bytes] = {}  # repository key files by URL
        self.previous = _previous_manifest(out)
        self.previous_files: dict[str, str] = {
            str(f.get("path")): str(f.get("sha256")) for f in self.previous.get("files", []) if isinstance(f, dict)
        }

    def add_file(self, rel: str, sha: str, source: str | None, checksum: str) -> None:
        size = (self.out / rel).stat().st_size
        self.files[rel] = {"path": rel, "sha256": sha, "size": size, "source": source, "checksum": checksum}

    def miss(self, what: str, url: str | None, error: str) -> None:
        self.missing.append({"what": what, "url": url, "error": error})

    def get(self, rel: str, url: str, expect: dict[str, str], size: int | None) -> str | None:
        """sha256 of ``rel`` in the bundle: kept when it matches what is known of it, else downloaded.

        Known: the published checksums (``expect``), else the sha256 an earlier run recorded.
        """
        dest = self.out / rel
        checks = dict(expect)
        if "sha256" not in checks and rel in self.previous_files:
            checks["sha256"] = self.previous_files[rel]
        if checks and dest.is_file() and (size is None or dest.stat().st_size == size):
            have = hash_file(dest, {"sha256", *checks})
            if all(have[a] == v.lower() for a, v in checks.items()):
                self.reused += 1
                return have["sha256"]
        self.log(f"download {url}")
        try:
            sha = self.fetcher.download(url, dest, self.partial, expect, size)
        except FetchError as e:
            self.miss(rel, url, e.reason)
            return None
        self.downloaded += 1
        return sha


def _previous_manifest(out: Path) -> dict[str, Any]:
    """An existing manifest (empty when there is none or it is unreadable: a link, not a regular
    file, or over its size limit is never read)."""
    try:
        data = json.loads(read_regular_file(out / MANIFEST, BUNDLE_MANIFEST_BYTES, follow_links=False))
    except (InputFileError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` through a temp file beside it: never half-written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def keep_previous(b: Builder, path: str, record: dict[str, Any]) -> dict[str, Any]:
    """Keep what an earlier run fetched under ``path``: an unreachable mirror does not empty a
    good bundle. ``record`` gets the previous run's packages and ``kept``."""
    for rel, sha in sorted(b.previous_files.items()):
        if rel.startswith(f"{path}/") and (b.out / rel).is_file():
            if hash_file(b.out / rel, ["sha256"])["sha256"] == sha:
                why = "kept from the previous run (the index could not be fetched or verified)"
                b.add_file(rel, sha, None, why)
            else:
                b.miss(rel, None, "changed since the previous run, and the index is not reachable to refetch it")
    for old in b.previous.get("repositories", []):
        if isinstance(old, dict) and old.get("path") == path:
            record["packages"] = old.get("packages", [])
            record["external"] = old.get("external", [])
    record["kept"] = True
    return record
