"""The bundle's format and on-disk layout constants."""

from __future__ import annotations

import re
from collections.abc import Callable

MANIFEST = "manifest.json"
#: The manifest's detached signature by the bundle key (the key whose fingerprint the operator pins).
MANIFEST_SIG = "manifest.json.asc"
# 2: apt repositories signed (InRelease, apt/gpuforge-bundle.gpg); 3: rpm repositories built
# and signed (repodata/repomd.xml.asc, rpm/gpuforge-bundle.asc); 4: the manifest signed
# (manifest.json.asc), the bundle key present in every bundle
FORMAT = "gpuforge-bundle/4"
PARTIAL = ".partial"
#: Kubernetes specs: the container images the cluster pulls (gpuforge.bundle.images).
IMAGES = "images.txt"
#: dpkg's architecture where a caller names none (nodes name theirs: ``gpuforge.spec.platforms``).
DEB_ARCH = "amd64"
# What dnf substitutes for ``$releasever`` on the EL 9 nodes the bundle serves.
RPM_RELEASEVER = "9"
CHUNK = 1 << 20
SAFE_DEB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._~%-]*\.deb$")
# Checksum fields of a Packages stanza, strongest first, with their hashlib names.
INDEX_SUMS = (("SHA512", "sha512"), ("SHA256", "sha256"), ("SHA1", "sha1"), ("MD5sum", "md5"))

Log = Callable[[str], None]
