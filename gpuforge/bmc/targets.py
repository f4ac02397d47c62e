"""The spec's BMCs as endpoints, and their credentials read from the control host.

Invariants: a node without a ``bmc`` section is an input error naming it; a credentials file is
read only when it is a regular file owned by this user and neither group nor world readable
(``chmod 600``), at most :data:`MAX_CREDENTIALS` bytes, and its content appears in no message.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuforge.bmc.transport import Credentials, Endpoint
from gpuforge.spec import hostlist
from gpuforge.spec.bmc import BmcProtocol
from gpuforge.spec.bmc_rules import bmc_addresses
from gpuforge.spec.cluster import Cluster

MAX_CREDENTIALS = 4096


class PowerInputError(Exception):
    """Input that ``gpuforge power`` refuses before any BMC is asked (exit 2)."""


@dataclass(frozen=True)
class BmcTarget:
    """One node's BMC as the spec gives it."""

    node: str
    protocol: BmcProtocol
    endpoint: Endpoint  # for IPMI its fingerprint is "" (the spec refuses one: IPMI has no TLS)
    system_id: str | None
    credentials_file: Path
    field: str  # the spec field naming the credentials file, for messages


def bmc_targets(cluster: Cluster, names: list[str]) -> list[BmcTarget]:
    """The BMC of each of ``names`` (spec order); PowerInputError naming the nodes that have none."""
    out: dict[str, BmcTarget] = {}
    for gi, group in enumerate(cluster.spec.node_groups):
        bmc = group.bmc
        if bmc is None:
            continue
        path = Path(os.path.expanduser(bmc.credentials_file))
        path = path if path.is_absolute() else cluster.folder / path
        for name, address in zip(group.hostnames, bmc_addresses(group), strict=True):
            if name in names and address is not None:
                ep = Endpoint(address, bmc.service_port, bmc.tls_fingerprint or "")
                field = f"node_groups[{gi}].bmc.credentials_file"
                out[name] = BmcTarget(name, bmc.protocol, ep, bmc.system_id, path, field)
    missing = [n for n in names if n not in out]
    if missing:
        raise PowerInputError(
            f"{hostlist.compress(missing)}: no bmc section in the spec (node_groups[].bmc): "
            "gpuforge cannot reach their BMCs"
        )
    return [out[n] for n in names]


def _parse(text: str) -> tuple[str, str] | None:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and ":" in lines[0]:
        user, _, password = lines[0].partition(":")
        return user.strip(), password
    if len(lines) == 2:
        return lines[0].strip(), lines[1]
    return None


def read_credentials(path: Path, field: str) -> Credentials:
    """The account in ``path``: ``username:password`` on one line, or the two on two lines."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise PowerInputError(f"{field}: {path}: cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PowerInputError(f"{field}: {path}: not a regular file")
        if st.st_mode & 0o077:
            raise PowerInputError(
                f"{field}: {path}: readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"it holds BMC credentials: chmod 600 {path}"
            )
        if st.st_uid != os.geteuid():
            raise PowerInputError(f"{field}: {path}: owned by another user (uid {st.st_uid})")
        data = os.read(fd, MAX_CREDENTIALS + 1)
    finally:
        os.close(fd)
    parsed = _parse(data.decode("utf-8", "replace")) if len(data) <= MAX_CREDENTIALS else None
    if parsed is None or not parsed[0] or not parsed[1]:
        raise PowerInputError(
            f"{field}: {path}: not 'username:password' on one line or username and password on two lines"
        )
    return Credentials(*parsed)
