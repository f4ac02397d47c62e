"""Value patterns several spec sections share (versions, Slurm times, driver versions)."""

from __future__ import annotations

VERSION = r"^[0-9][0-9A-Za-z.+~:_-]*$"
SLURM_TIME = r"^(UNLIMITED|INFINITE|(\d+-)?\d+(:\d\d){0,2})$"
DRIVER_VERSION = r"^\d{3}\.\d+(\.\d+)?$"
