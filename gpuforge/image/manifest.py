"""What an image holds, listed for comparison: its record, its packages and its config digests.

Two builds of the same spec and base list the same packages and the same config digests
(``image-manifest.json``; the build time is the one field that differs).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from gpuforge.deploy.image_mode import FileKey
from gpuforge.image.safe_files import write_file


def installed_packages(tree: str) -> dict[str, str]:
    """name -> version of every package dpkg lists as installed in the tree."""
    out: dict[str, str] = {}
    try:
        text = Path(tree, "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return out
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status") == "install ok installed" and "Package" in fields:
            arch = fields.get("Architecture", "")
            name = fields["Package"] + (f":{arch}" if arch not in ("", "all", "amd64") else "")
            out[name] = fields.get("Version", "")
    return dict(sorted(out.items()))


def config_digests(tree: str, common: frozenset[FileKey]) -> dict[str, str]:
    """sha256 of each file of the group's common set that the image holds."""
    out: dict[str, str] = {}
    for path, _ in sorted(common):
        full = os.path.join(tree, path.lstrip("/"))
        if os.path.isfile(full) and not os.path.islink(full):
            with open(full, "rb") as f:
                out[path] = hashlib.sha256(f.read()).hexdigest()
    return out


def image_manifest(tree: str, record: dict[str, Any], common: frozenset[FileKey]) -> dict[str, Any]:
    return {"record": record, "packages": installed_packages(tree), "configs": config_digests(tree, common)}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    write_file(str(path), (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
