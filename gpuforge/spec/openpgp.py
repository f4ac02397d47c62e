"""OpenPGP key fingerprints as spec values: the trust anchors the operator pins.

A pinned fingerprint is what a key is checked against before anything it signed is believed
(the offline bundle's key, a site mirror's re-signing key). Only version 4 fingerprints (40 hex
digits, RFC 4880 section 12.2) are accepted: a short or long key ID is not a fingerprint.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_FINGERPRINT = re.compile(r"[0-9A-F]{40}")


def openpgp_fingerprint(value: str) -> str:
    """A v4 primary key fingerprint as gpg prints it (spaces and any case allowed), in the one
    form every comparison uses: 40 upper-case hex digits without spaces."""
    compact = value.replace(" ", "").upper()
    if not _FINGERPRINT.fullmatch(compact):
        raise ValueError(
            f"{value!r} is not an OpenPGP v4 fingerprint (40 hex digits, as 'gpg --show-keys' prints; not a key ID)"
        )
    return compact


Fingerprint = Annotated[str, AfterValidator(openpgp_fingerprint)]
