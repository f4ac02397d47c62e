"""Secrets kept on the control host: the munge key, database passwords and the health key.

They live in a private directory (0700; files 0600), are generated once, and are only
ever written to nodes as files with tight modes. Plans, diffs and logs see
``Secrets.redacted()`` instead.
"""

from __future__ import annotations

import os
import secrets as pysecrets
import shutil
import tempfile
from pathlib import Path

from gpuforge.deploy.k8s_pki import generate_pki
from gpuforge.render.files import Secrets
from gpuforge.spec.state_dir import DB_PASSWORD_FILE, HEALTH_KEY_FILE, MUNGE_KEY_FILE, secrets_dir, state_root

__all__ = ["SecretStore", "state_root"]

MUNGE_KEY_BYTES = 1024
#: The cluster's health key: HMAC-SHA256's block is 64 bytes, and a key of 32 random bytes is its full strength.
HEALTH_KEY_BYTES = 32


class SecretStore:
    """A cluster's secrets directory."""

    def __init__(self, cluster: str, root: Path | None = None) -> None:
        self.dir = secrets_dir(cluster, root)

    def _ensure_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)

    def _read_or_create(self, name: str, make: bytes) -> bytes:
        """The secret ``name``; created once, atomically: of two processes creating it at the same
        time, one creates it and both use that one (a hard link is created only if absent)."""
        path = self.dir / name
        if path.exists():
            return path.read_bytes()
        self._ensure_dir()
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=self.dir)  # 0600 from creation
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(make)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return path.read_bytes()  # another process won the race: use its secret
            return make
        finally:
            os.unlink(tmp)

    def munge_key(self) -> bytes:
        return self._read_or_create(MUNGE_KEY_FILE, pysecrets.token_bytes(MUNGE_KEY_BYTES))

    def rotate_munge_key(self) -> bytes:
        """Replace the munge key (the next apply pushes it and restarts munge everywhere)."""
        (self.dir / MUNGE_KEY_FILE).unlink(missing_ok=True)
        return self.munge_key()

    def db_password(self) -> str:
        return self._read_or_create(DB_PASSWORD_FILE, pysecrets.token_urlsafe(24).encode()).decode()

    def health_key(self) -> bytes:
        """The key each node's HMAC key is derived from (``gpuforge.render.health.node_health_key``)."""
        return self._read_or_create(HEALTH_KEY_FILE, pysecrets.token_bytes(HEALTH_KEY_BYTES))

    def kubernetes_pki(self) -> dict[str, bytes]:
        """The Kubernetes cluster's shared keys (``gpuforge.deploy.k8s_pki``), made once, as a whole:
        generated in a private temporary directory that is renamed into place (of two processes,
        one wins and both use its keys)."""
        final = self.dir / "k8s-pki"
        if not final.is_dir():
            self._ensure_dir()
            tmp = Path(tempfile.mkdtemp(prefix=".k8s-pki.", dir=self.dir))  # 0700
            try:
                for rel, data in generate_pki().items():
                    path = tmp / rel
                    path.parent.mkdir(mode=0o700, exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                try:
                    os.rename(tmp, final)
                except OSError:
                    if not final.is_dir():
                        raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return {str(p.relative_to(final)): p.read_bytes() for p in sorted(final.rglob("*")) if p.is_file()}

    def load(self) -> Secrets:
        """The real secrets (generated on first use)."""
        return Secrets(
            slurmdbd_db_password=self.db_password(), munge_key=self.munge_key(), health_key=self.health_key()
        )
