"""``/etc/gpuforge/image.json``: what an image was built from, and how a node compares with it.

Invariants: the record holds no secret and nothing of one node (group, spec hash, layer digests,
base OS, build time, gpuforge version); the layer digests are ``deploy.image_mode.layer_digest``
of what each layer put in the image, so a plan on a node recomputes them from the current spec
and says which layers differ (``deploy.image_mode.ImageCompare``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpuforge import __version__
from gpuforge.spec import Spec


def spec_hash(spec: Spec) -> str:
    """SHA-256 of the spec as loaded (comments and key order do not count)."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def image_record(spec: Spec, group: str, layers: dict[str, str], base_os: str, built: str) -> dict[str, Any]:
    """The record as a JSON object (``built``: ISO 8601 UTC)."""
    return {
        "format": 1,
        "spec_hash": spec_hash(spec),
        "cluster": spec.cluster.name,
        "group": group,
        "base_os": base_os,
        "built": built,
        "gpuforge_version": __version__,
        "layers": dict(sorted(layers.items())),
    }


def record_text(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"
