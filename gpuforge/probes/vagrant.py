"""Reach Vagrant VMs (a spec with `connector: vagrant`): parse `vagrant ssh-config` output (stdlib only)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass

_LINE = re.compile(r"^([A-Za-z]+)\s*(?:=|\s)\s*(.*)$")


class VagrantError(RuntimeError):
    """Vagrant could not say how to reach its machines (not installed, not up, no Vagrantfile)."""


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
    """Run ``vagrant ssh-config`` in ``cwd`` and parse it; :class:`VagrantError` says why it could not."""
    try:
        cp = subprocess.run(["vagrant", "ssh-config"], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VagrantError(f"vagrant ssh-config in {cwd}: {exc}") from None
    if cp.returncode != 0:
        raise VagrantError(f"vagrant ssh-config in {cwd} failed: {' '.join(cp.stderr.split())[:300]}")
    return parse_ssh_config(cp.stdout)


def machines_for(names: list[str], cwd: str, timeout: float = 120) -> dict[str, VagrantHost]:
    """How to reach each of ``names`` per ``vagrant ssh-config`` in ``cwd`` (every name must be listed)."""
    if not names:
        return {}
    hosts = ssh_config(cwd, timeout)
    missing = [n for n in names if n not in hosts]
    if missing:
        raise VagrantError(f"'vagrant ssh-config' in {cwd} lists no machine {', '.join(missing)} (is it up?)")
    return {n: hosts[n] for n in names}
