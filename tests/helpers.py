"""Shared test helpers: repository paths, upstream reference data, example specs and variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import Spec, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[1]
INVENTORIES = REPO / "inventories"
UPSTREAM = REPO / ".." / "shared" / "reference" / "upstream"
#: Tests that read ``../shared/reference/upstream``: the data is part of the test bed, so its
#: absence is a failure (``upstream_data`` in tests/conftest.py), never a skip.
needs_upstream = pytest.mark.usefixtures("upstream_data")


def require_upstream() -> Path:
    """``UPSTREAM``, or a test failure naming what is missing."""
    if not UPSTREAM.is_dir():
        pytest.fail(
            f"the upstream reference data is missing ({UPSTREAM.resolve()}): clone the project with ../shared "
            "beside it (the test bed includes it)",
            pytrace=False,
        )
    return UPSTREAM


def inventory(name: str) -> Spec:
    """An example spec from inventories/."""
    return load_spec(INVENTORIES / f"{name}.yaml")


def variant(name: str, change: Callable[[dict[str, Any]], None]) -> Spec:
    """An example inventory with a change applied to its YAML data, checked like a real file."""
    data = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text())
    change(data)
    return parse_spec(yaml.safe_dump(data))


def write_bundle_manifest(bundle: Path, complete: bool = True) -> dict[str, str]:
    """A manifest listing every regular file of a test bundle (path -> sha256 returned); its apt
    repositories signed first, as ``gpuforge bundle`` signs them."""
    import hashlib
    import json

    from gpuforge.bundle.layout import FORMAT
    from gpuforge.bundle.trust import sign_repositories

    repos = sorted(p.parent.relative_to(bundle).as_posix() for p in bundle.glob("apt/*/Packages"))
    if repos:
        sign_repositories(bundle, repos, "test", lambda rel, data: (bundle / rel).write_bytes(data))
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink() and p.name != "manifest.json")
    entries = [
        {
            "path": p.relative_to(bundle).as_posix(),
            "size": p.stat().st_size,
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
        }
        for p in files
    ]
    manifest = {"format": FORMAT, "files": entries, "complete": complete}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return {e["path"]: e["sha256"] for e in entries}
