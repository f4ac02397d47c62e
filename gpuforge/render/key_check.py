"""A repository key checked on the node against its pinned fingerprint before it is moved into place.

Debian and Ubuntu nodes have ``gpgv`` (apt needs it) but not always ``gpg``, so the check is a
small stdlib-only Python program (gpuforge needs ``python3`` on nodes): it reads the key file,
ASCII-armored or binary, walks its OpenPGP packets (RFC 4880 section 4.2: old and new packet
headers) and computes each primary key's v4 fingerprint (section 12.2: SHA-1 over 0x99, the
two-octet length and the public-key packet body). It exits 0 only when the file holds exactly
one primary key and that key's fingerprint is the pinned one; otherwise it names what it found
on stderr and exits 1, so ``check && mv`` never installs another key.
"""

from __future__ import annotations

import shlex

#: The program ``python3 -c`` runs: ``KEY_FILE FINGERPRINT``. Subkeys (tag 14) are not primary keys.
KEY_CHECK_PROGRAM = r"""
import base64, hashlib, sys

def unarmor(data):
    lines = data.decode("ascii", "replace").splitlines()
    begin = [i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")]
    if not begin:
        return data
    body = []
    for line in lines[begin[0] + 1:]:
        line = line.strip()
        if line.startswith("-----END"):
            break
        if line and ":" not in line and not line.startswith("="):
            body.append(line)
    return base64.b64decode("".join(body), validate=True)

def primary_fingerprints(data):
    found, i = [], 0
    while i < len(data):
        head = data[i]
        i += 1
        if not head & 0x80:
            raise ValueError("not an OpenPGP packet")
        if head & 0x40:
            tag, first = head & 0x3F, data[i]
            i += 1
            if first < 192:
                size = first
            elif first < 224:
                size, i = ((first - 192) << 8) + data[i] + 192, i + 1
            elif first == 255:
                size, i = int.from_bytes(data[i:i + 4], "big"), i + 4
            else:
                raise ValueError("partial packet length in a key")
        else:
            tag, width = (head >> 2) & 0x0F, (1, 2, 4, 0)[head & 3]
            if not width:
                raise ValueError("indeterminate packet length in a key")
            size, i = int.from_bytes(data[i:i + width], "big"), i + width
        body, i = data[i:i + size], i + size
        if len(body) != size:
            raise ValueError("truncated packet")
        if tag == 6:
            if body[:1] != b"\x04":
                raise ValueError("a version %d key (only v4 fingerprints are pinned)" % body[0])
            found.append(hashlib.sha1(b"\x99" + size.to_bytes(2, "big") + body).hexdigest().upper())
    return found

path, pinned = sys.argv[1], sys.argv[2]
try:
    found = primary_fingerprints(unarmor(open(path, "rb").read()))
except (OSError, ValueError, IndexError) as e:
    sys.exit("%s: not a readable OpenPGP key (%s); the pinned key is %s" % (path, e, pinned))
if found != [pinned]:
    sys.exit("%s: key %s, not the pinned %s: refused" % (path, ", ".join(found) or "(none)", pinned))
"""


def key_check_command(key_file: str, fingerprint: str) -> str:
    """Shell command that succeeds only when ``key_file`` (on the node) is exactly the key pinned by
    ``fingerprint`` (40 upper-case hex digits); chain the command that installs the key after it."""
    return f"python3 -c {shlex.quote(KEY_CHECK_PROGRAM)} {shlex.quote(key_file)} {shlex.quote(fingerprint)}"
