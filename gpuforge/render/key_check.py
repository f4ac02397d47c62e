"""A repository key checked on the node against its pinned fingerprint(s) before it is moved into place.

Debian and Ubuntu nodes have ``gpgv`` (apt needs it) but not always ``gpg``, so the check is a
small stdlib-only Python program (gpuforge needs ``python3`` on nodes): it reads the key file,
ASCII-armored or binary, walks its OpenPGP packets (RFC 4880 section 4.2: old and new packet
headers) and computes each primary key's v4 fingerprint (section 12.2: SHA-1 over 0x99, the
two-octet length and the public-key packet body). It exits 0 only when the set of primary keys
in the whole file is exactly the pinned set; otherwise it names what it found on stderr and exits
1, so ``check && mv`` never installs another key.

Invariant: every byte of the file is read as a key, as gpg and apt read it. An armored file is
decoded block by block (gpg imports every ``PUBLIC KEY BLOCK`` of a file, so a second block
holding another key is counted, not ignored); text outside the blocks, another kind of armor
block, or a packet that is not part of a transferable public key (RFC 4880 section 11.1: key,
subkey, user ID, user attribute, signature, trust) is refused.
"""

from __future__ import annotations

import shlex

#: The program ``python3 -c`` runs: ``KEY_FILE FINGERPRINT...``. Subkeys (tag 14) are not primary keys.
KEY_CHECK_PROGRAM = r"""
import base64, hashlib, sys

BEGIN, END = "-----BEGIN PGP PUBLIC KEY BLOCK-----", "-----END PGP PUBLIC KEY BLOCK-----"
KEY_PACKETS = {2, 6, 12, 13, 14, 17}

def unarmor(data):
    text = data.decode("ascii", "replace")
    if "-----BEGIN" not in text:
        return data
    out, body, headers = b"", None, False
    for line in text.splitlines():
        line = line.strip()
        if body is None:
            if line == BEGIN:
                body, headers = [], True
            elif line:
                raise ValueError("text outside a public key block")
        elif line == END:
            out, body = out + base64.b64decode("".join(body), validate=True), None
        elif line.startswith("-----"):
            raise ValueError("a malformed armor block")
        elif headers and ":" in line:
            continue
        else:
            headers = headers and not line
            if line and not line.startswith("="):
                body.append(line)
    if body is not None:
        raise ValueError("an armor block without its END line")
    return out

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
        if tag not in KEY_PACKETS:
            raise ValueError("a packet of tag %d, not part of a public key" % tag)
        if tag == 6:
            if body[:1] != b"\x04":
                raise ValueError("a version %d key (only v4 fingerprints are pinned)" % body[0])
            found.append(hashlib.sha1(b"\x99" + size.to_bytes(2, "big") + body).hexdigest().upper())
    return found

path, pinned = sys.argv[1], sys.argv[2:]
want = ", ".join(pinned)
try:
    data = open(path, "rb").read((1 << 20) + 1)
    if len(data) > 1 << 20:
        raise ValueError("over 1 MiB")
    found = primary_fingerprints(unarmor(data))
except (OSError, ValueError, IndexError) as e:
    sys.exit("%s: not a readable OpenPGP key (%s); the pinned key is %s" % (path, e, want))
if not found or sorted(set(found)) != sorted(set(pinned)):
    sys.exit("%s: key %s, not the pinned %s: refused" % (path, ", ".join(found) or "(none)", want))
"""


def key_check_command(key_file: str, *fingerprints: str) -> str:
    """Shell command that succeeds only when ``key_file`` (on the node) holds exactly the keys pinned
    by ``fingerprints`` (40 upper-case hex digits each; a dnf key file may hold several) and no
    other; chain the command that installs the key after it."""
    if not fingerprints:
        raise ValueError("key_check_command needs at least one pinned fingerprint")
    pins = " ".join(shlex.quote(f) for f in fingerprints)
    return f"python3 -c {shlex.quote(KEY_CHECK_PROGRAM)} {shlex.quote(key_file)} {pins}"
