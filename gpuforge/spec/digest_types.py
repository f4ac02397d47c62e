"""Value types of the operator's sha256 pins (``sources.artifact_sha256``).

A pin lands in a shell command on every node (``sha256sum -c``), so a value is exactly 64
hexadecimal digits (written in lower case); a key is the bare file name gpuforge gives the release
file (``enroot+caps_3.5.0-1_amd64.deb``): no path, no leading dot, nothing a shell or a path reads
specially.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_SHA256 = re.compile(r"[0-9a-f]{64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,199}")


def _sha256(value: str) -> str:
    lowered = value.lower()
    if not _SHA256.fullmatch(lowered):
        raise ValueError(f"{value!r} is not a sha256: 64 hexadecimal digits, as sha256sum prints them")
    return lowered


def _file_name(value: str) -> str:
    if not _FILE_NAME.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{value!r} is not a release file name (letters, digits and . _ + ~ -, no path), "
            "e.g. enroot_3.5.0-1_amd64.deb"
        )
    return value


Sha256 = Annotated[str, AfterValidator(_sha256)]
ArtifactFileName = Annotated[str, AfterValidator(_file_name)]
