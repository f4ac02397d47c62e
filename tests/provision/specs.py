"""The specs the provisioning tests read: a controller without network boot and two compute nodes
that boot from the control host at 10.99.0.1/24."""

from __future__ import annotations

import subprocess
import sys
from copy import deepcopy
from pathlib import Path
from typing import Any

from gpuforge.spec import Spec, parse_spec
from tests import yaml_text

MACS = {"cpu1": "0c:c4:7a:00:00:01", "cpu2": "0c:c4:7a:00:00:02"}
HARDWARE = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 4000}


def spec_data(
    mode: str = "dhcp", boot: dict[str, Any] | None = None, server: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Slurm spec: ctl1 (no boot section) and cpu1, cpu2 (10.99.0.11-12) booting ``stateless``."""
    srv: dict[str, Any] = {"interface": "gfpxe0", "address": "10.99.0.1/24", "mode": mode}
    if mode == "dhcp":
        srv["range"] = {"start": "10.99.0.100", "end": "10.99.0.150"}
    cpu_boot: dict[str, Any] = {"mode": "stateless", "image": "images/cpu", "macs": dict(MACS),
                                "nfs_export": "/srv/gpuforge/cpu"}  # fmt: skip
    return {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "provisioning": {"server": {**srv, **(server or {})}},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "address_start": "10.99.0.10", "roles": ["controller", "accounting-db"]},
            {"name": "cpu", "hosts": "cpu[1-2]", "address_start": "10.99.0.11", "roles": ["compute"],
             "hardware": HARDWARE, "boot": {**cpu_boot, **(boot or {})}},
        ],
        "slurm": {"partitions": [{"name": "batch", "nodes": "cpu"}]},
    }  # fmt: skip


def text(data: dict[str, Any]) -> str:
    return yaml_text.dump(data, sort_keys=False)


def parse(data: dict[str, Any], folder: Path) -> Spec:
    return parse_spec(text(data), base_dir=folder)


def write(data: dict[str, Any], folder: Path) -> Path:
    path = folder / "cluster.yaml"
    path.write_text(text(data))
    return path


def edited(data: dict[str, Any], *path: str | int, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with the value at ``path`` replaced (a missing last key is added)."""
    out = deepcopy(data)
    here: Any = out
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return out


REPO = Path(__file__).resolve().parents[2]
#: The BMC password of :func:`bmc_site`'s credentials file: no output may show it.
SECRET = "s3cret-Passw0rd"


def provision(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpuforge provision ARGS`` as a user runs it: never a traceback, never the BMC password."""
    done = subprocess.run([sys.executable, "-m", "gpuforge", "provision", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


def bmc_site(folder: Path) -> Path:
    """The spec written in ``folder``, its compute nodes behind IPMI BMCs, a 0600 credentials file beside it."""
    data = spec_data()
    data["node_groups"][1]["bmc"] = {"protocol": "ipmi", "address_start": "198.51.100.21",
                                     "credentials_file": "bmc.cred"}  # fmt: skip
    cred = folder / "bmc.cred"
    cred.write_text(f"admin:{SECRET}\n")
    cred.chmod(0o600)
    return write(data, folder)
