"""The bundle's format and on-disk layout constants."""

from __future__ import annotations

import re
from collections.abc import Callable

MANIFEST = "manifest.json"
FORMAT = "gpuforge-bundle/2"  # 2: apt repositories signed (InRelease, apt/gpuforge-bundle.gpg)
PARTIAL = ".partial"
ARCHES = ("amd64", "all")
# Where a repository URL names the architecture (libnvidia-container's ``stable/deb/$(ARCH)``).
ARCH_IN_URL = "amd64"
CHUNK = 1 << 20
SAFE_DEB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._~%-]*\.deb$")
# Checksum fields of a Packages stanza, strongest first, with their hashlib names.
INDEX_SUMS = (("SHA512", "sha512"), ("SHA256", "sha256"), ("SHA1", "sha1"), ("MD5sum", "md5"))

Log = Callable[[str], None]
