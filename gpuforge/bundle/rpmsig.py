"""OpenPGP signatures of .rpm files, checked with rpm's own ``rpmkeys`` in a private database.

NVIDIA's CUDA repository and Docker's sign their packages, not their metadata (their ``.repo``
files: ``gpgcheck=1``, no ``repo_gpgcheck``), so a bundle built from them checks every
package's signature with the repository key: upstream key -> each ``.rpm``. The bundle's own
rpm-md metadata is then signed with the bundle key (``repomd.xml.asc``), which covers each
package's checksum on the nodes.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from gpuforge.bundle.signing import SignatureError

_TIMEOUT = 120.0


def rpm_tools_missing() -> list[str]:
    """The programs package-signature checks need that are not on PATH."""
    return [t for t in ("rpmkeys", "rpm") if shutil.which(t) is None]


class RpmKeyring:
    """A throw-away rpm database holding one repository key (``with`` removes it)."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.db = ""

    def __enter__(self) -> RpmKeyring:
        if b"-----BEGIN PGP PUBLIC KEY BLOCK-----" not in self.key:
            raise SignatureError("the repository key is not an ASCII-armored OpenPGP key (rpmkeys imports only those)")
        self.db = tempfile.mkdtemp(prefix="gpuforge-rpmdb-")
        try:
            key_file = Path(self.db) / "key.asc"
            key_file.write_bytes(self.key)
            self._rpmkeys(["--import", str(key_file)])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if self.db:
            shutil.rmtree(self.db, ignore_errors=True)
            self.db = ""

    def _rpmkeys(self, args: list[str], tool: str = "rpmkeys") -> str:
        cmd = [tool, "--dbpath", self.db, "--define", "_pkgverify_level signature", *args]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=_TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SignatureError(f"{tool} is not installed (apt-get install rpm; dnf install rpm)") from None
        except subprocess.TimeoutExpired:
            raise SignatureError(f"{tool} did not finish in {_TIMEOUT:.0f} s") from None
        text = (r.stdout + r.stderr).decode("utf-8", "replace").strip()
        if r.returncode != 0:
            raise SignatureError(text.splitlines()[-1] if text else f"{tool} exit {r.returncode}")
        return text

    def check(self, rpm: Path, nevra: str) -> None:
        """Raise SignatureError unless ``rpm`` carries a valid signature by the key and is the
        package the (unsigned) metadata says (``name-epoch:version-release.arch``)."""
        try:
            out = self._rpmkeys(["--checksig", str(rpm)])
        except SignatureError as e:
            raise SignatureError(f"its signature does not verify with the repository key ({e})") from None
        if "signatures OK" not in out:
            raise SignatureError(f"not signed by the repository key ({out})")
        qf = "%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}"
        header = self._rpmkeys(["-qp", "--qf", qf, str(rpm)], tool="rpm")
        if header != nevra:
            raise SignatureError(f"the signed package is {header}, the repository metadata says {nevra}")
