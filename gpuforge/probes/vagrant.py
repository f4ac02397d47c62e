"""Reach Vagrant VMs (a spec with `connector: vagrant`): parse `vagrant ssh-config` output (stdlib only)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass

_LINE = re.compile(r"^([A-Za-z]+)\s*(?:=|\s)\s*(.*)$")


@dataclass(frozen=True)
class VagrantHost:
    """How to SSH into one Vagrant machine."""

    name: str
    hostname: str
    port: int
    user: str
    identity_file: str | None


def _value(rest: str) -> str:
    rest = rest.strip()
    if rest.startswith('"'):
        try:
            return shlex.split(rest)[0]
        except ValueError:
            return rest.strip('"')
    return rest


def parse_ssh_config(text: str) -> dict[str, VagrantHost]:
    """Per-host (hostname, port, user, identity file) from ``vagrant ssh-config`` output.

    Only the first ``IdentityFile`` of a host is kept; Vagrant's host-key options (it turns
    checking off) are deliberately ignored: gpuforge always checks host keys.
    """
    hosts: dict[str, VagrantHost] = {}
    cur: dict[str, str] = {}
    name: str | None = None

    def flush() -> None:
        if name is not None:
            hosts[name] = VagrantHost(
                name=name,
                hostname=cur.get("hostname", name),
                port=int(cur.get("port", "22")),
                user=cur.get("user", "vagrant"),
                identity_file=cur.get("identityfile"),
            )

    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        key, rest = m.group(1).lower(), m.group(2)
        if key == "host":
            flush()
            name, cur = _value(rest), {}
        elif name is not None and key not in cur:
            cur[key] = _value(rest)
    flush()
    return hosts


def ssh_config(cwd: str = ".", timeout: float = 120) -> dict[str, VagrantHost]:
    """Run ``vagrant ssh-config`` in ``cwd`` and parse it."""
    cp = subprocess.run(["vagrant", "ssh-config"], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise RuntimeError(f"vagrant ssh-config failed: {cp.stderr.strip()}")
    return parse_ssh_config(cp.stdout)
