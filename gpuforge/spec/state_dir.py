"""Where gpuforge keeps per-cluster state on the control host, and reading a stored secret back.

The secrets themselves are made by ``gpuforge.deploy.secrets.SecretStore`` (0700 folder, 0600
files); :func:`stored_secret` only reads one that exists, never creates one, so a check (validate)
can compare a node's secret-bearing files with what apply wrote without generating anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuforge.spec.bounded_read import InputFileError, read_regular_file
from gpuforge.spec.limits import Limit

#: File names of the secrets in a cluster's ``secrets`` folder.
MUNGE_KEY_FILE = "munge.key"
DB_PASSWORD_FILE = "slurmdbd-db-password"
HEALTH_KEY_FILE = "health-hmac-key"
SECRET_BYTES = Limit("bytes in a stored secret", 64 * 1024, "a munge key is 1 KiB, a password a few dozen bytes")


def state_root() -> Path:
    """Where gpuforge keeps per-cluster state on the control host."""
    env = os.environ.get("GPUFORGE_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuforge"


def secrets_dir(cluster: str, root: Path | None = None) -> Path:
    return (root or state_root()) / cluster / "secrets"


def stored_secret(cluster: str, name: str) -> bytes | None:
    """The secret ``name`` of ``cluster`` as apply stored it (None: not stored, or unreadable)."""
    try:
        return read_regular_file(secrets_dir(cluster) / name, SECRET_BYTES, follow_links=False)
    except InputFileError:
        return None
