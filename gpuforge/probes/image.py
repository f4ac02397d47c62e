"""The record a baked node image carries: ``/etc/gpuforge/image.json`` (stdlib only).

``gpuforge image build`` writes it (spec hash, node group, per-layer digests of what the layer
put in the image, base OS, build time); ``gpuforge plan`` compares its layer digests with the
spec's. The reading prints the file, or ``__missing=`` when the node was not booted from an image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gpuforge.probes._common import MISSING_MARKER
from gpuforge.probes.reading import Reading

IMAGE_RECORD = "/etc/gpuforge/image.json"


@dataclass
class ImageRecord:
    """What the image record says; ``present`` False: no record (or not one gpuforge can read)."""

    present: bool = False
    spec_hash: str | None = None
    group: str | None = None
    base_os: str | None = None
    built: str | None = None
    gpuforge_version: str | None = None
    layers: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    """Why a file that exists could not be read as a record (None: it could, or there is none)."""


def image_record_command(path: str = IMAGE_RECORD) -> str:
    return f"cat {path} 2>/dev/null || echo {MISSING_MARKER}{path}"


def parse_image_record(lines: list[str]) -> ImageRecord:
    """The record from the file's lines; total (a broken file is ``problem``, never an exception)."""
    text = "\n".join(lines).strip()
    if not text or text.startswith(MISSING_MARKER):
        return ImageRecord()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        return ImageRecord(problem=f"not JSON: {str(exc)[:200]}")
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), dict):
        return ImageRecord(problem="no 'layers' object")

    def text_of(key: str) -> str | None:
        value = doc.get(key)
        return value if isinstance(value, str) else None

    layers = {str(k): str(v) for k, v in doc["layers"].items()}
    return ImageRecord(
        True, text_of("spec_hash"), text_of("group"), text_of("base_os"), text_of("built"),
        text_of("gpuforge_version"), layers,
    )  # fmt: skip


IMAGE_RECORD_READING: Reading[ImageRecord] = Reading("image.record", image_record_command, parse_image_record)
