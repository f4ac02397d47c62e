"""The NVIDIA container toolkit's ``/etc/nvidia-container-runtime/config.toml`` (stdlib only).

The toolkit layer reads the file in its one round trip and changes it only where the settings
gpuforge wants differ from what is there (``gpuforge.render.nvidia.UNPRIVILEGED_GPU_SETTINGS``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping


def top_level_bools(text: str | None) -> dict[str, bool]:
    """The file's top-level boolean keys (commented-out keys are absent, as the toolkit reads them).

    A missing or unparseable file yields no keys: the toolkit's defaults apply to it.
    """
    if not text:
        return {}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, bool)}


def differing(text: str | None, wanted: Mapping[str, bool], defaults: Mapping[str, bool]) -> dict[str, bool]:
    """The ``wanted`` settings the file does not have yet (an absent key has its value in ``defaults``)."""
    have = top_level_bools(text)
    return {k: v for k, v in wanted.items() if have.get(k, defaults.get(k)) is not v}
