"""Re-check a bundle against its manifest (nothing unverified is pushed to a node)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuforge.bundle.fetch import hash_file
from gpuforge.bundle.layout import MANIFEST, PARTIAL


def verify_bundle(bundle_dir: str | Path) -> list[str]:
    """Problems of a bundle against its manifest (empty: every file is there and intact).

    Checks each listed file's size and sha256, and that ``apt/`` and ``rpm/`` (pushed to
    the nodes whole) hold no file the manifest does not list.
    """
    out = Path(bundle_dir)
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        entries = list(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"{out / MANIFEST}: cannot read the manifest ({err})"]
    problems: list[str] = []
    listed: set[str] = set()
    for e in entries:
        rel = str(e.get("path", ""))
        listed.add(rel)
        p = out / rel
        if not rel or rel.startswith("/") or ".." in Path(rel).parts:
            problems.append(f"manifest entry with a bad path: {rel!r}")
        elif not p.is_file():
            problems.append(f"{rel}: missing")
        elif p.stat().st_size != e.get("size"):
            problems.append(f"{rel}: {p.stat().st_size} bytes, the manifest says {e.get('size')}")
        elif hash_file(p, ["sha256"])["sha256"] != e.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (changed or corrupted)")
    for top in ("apt", "rpm"):
        for p in sorted((out / top).rglob("*")) if (out / top).is_dir() else []:
            rel = p.relative_to(out).as_posix()
            if p.is_file() and rel not in listed:
                problems.append(f"{rel}: not in the manifest (it would be pushed to the nodes unchecked)")
    if (out / PARTIAL).exists():
        problems.append(f"{PARTIAL}/: an interrupted run left partial downloads")
    if not manifest.get("complete", False):
        problems.append(
            f"the manifest records an incomplete bundle ({len(manifest.get('missing', []))} missing, "
            f"{len(manifest.get('unsupported', []))} unsupported)"
        )
    return problems
