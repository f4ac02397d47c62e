"""sushy-tools' Redfish emulator (``sushy-emulator --fake``: its in-memory systems driver) on
127.0.0.1 with TLS from a self-signed certificate made here and HTTP basic auth from a bcrypt
htpasswd file, and helpers to write specs and credentials files that point at it.

The fake driver applies a power change 1 to 11 seconds after it is asked (its own "hardware actions
are not immediate": ``random.randint(1, 11)``); the emulator here is started with the shortest delay of
that range (1 s: :data:`LAUNCH`), which keeps the power tests from waiting up to 11 s a change, and
:func:`wait_power` still polls.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests import yaml_text

USER, PASSWORD = "gpuforge-admin", "s3cret-Pa55-not-in-output"

#: sushy-emulator's own entry point (``sushy_tools.emulator.main:main``), its fake driver's delay fixed
#: at the lower end of its range.
LAUNCH = (
    "import sys\n"
    "from sushy_tools.emulator.resources.systems import fakedriver\n"
    "class Shortest:\n"
    "    @staticmethod\n"
    "    def randint(low, high):\n"
    "        return low\n"
    "fakedriver.random = Shortest()\n"
    "from sushy_tools.emulator.main import main\n"
    "sys.argv[0] = 'sushy-emulator'\n"
    "sys.exit(main())\n"
)


@dataclass
class Emulator:
    port: int
    fingerprint: str  # sha256 of the certificate's DER, lower-case hex
    systems: list[str]  # the fake systems' ids (uuids), one per test node
    log: Path
    cert: Path
    key: Path

    def resets(self) -> int:
        """How many reset actions the emulator has been sent so far (its request log)."""
        return self.log.read_text(errors="replace").count("Actions/ComputerSystem.Reset")

    def patches(self, system: str) -> int:
        """How many PATCH requests of ``system`` the emulator has logged so far (werkzeug's request log)."""
        return self.log.read_text(errors="replace").count(f"PATCH /redfish/v1/Systems/{system} HTTP/")


def make_cert(folder: Path) -> tuple[Path, Path, str]:
    """A self-signed certificate and key for 127.0.0.1; (cert, key, SHA-256 fingerprint of the DER)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bmc.test",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    return cert, key, hashlib.sha256(der).hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _htpasswd(path: Path) -> None:
    import bcrypt

    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    path.write_text(f"{USER}:{hashed}\n")


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sushy-emulator exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"sushy-emulator did not listen on 127.0.0.1:{port}: {log.read_text()[-2000:]}")


def start(folder: Path, count: int) -> tuple[Emulator, subprocess.Popen[bytes]]:
    """The emulator with ``count`` fake systems (all Off), listening on a free loopback port."""
    binary = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent)) or shutil.which("sushy-emulator")
    if binary is None:
        raise RuntimeError("sushy-emulator is not installed (pip install 'sushy-tools>=2.2': the dev extra)")
    cert, key, fingerprint = make_cert(folder)
    _htpasswd(folder / "htpasswd")
    systems = [str(uuid.uuid4()) for _ in range(count)]
    fakes = [{"uuid": u, "name": f"fake{i}", "power_state": "Off", "nics": []} for i, u in enumerate(systems)]
    (folder / "state").mkdir()
    (folder / "emulator.conf").write_text(
        f"SUSHY_EMULATOR_AUTH_FILE = {str(folder / 'htpasswd')!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(folder / 'state')!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fakes!r}\n"
    )
    port, log = _free_port(), folder / "emulator.log"
    argv = [sys.executable, "-c", LAUNCH, "--config", str(folder / "emulator.conf"), "--fake", "-i", "127.0.0.1",
            "-p", str(port), "--ssl-certificate", str(cert), "--ssl-key", str(key)]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(folder)}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _wait_listening(port, proc, log)
    return Emulator(port, fingerprint, systems, log, cert, key), proc


def credentials_file(folder: Path, password: str = PASSWORD, mode: int = 0o600) -> Path:
    path = folder / "bmc.cred"
    path.write_text(f"{USER}:{password}\n")
    path.chmod(mode)
    return path


def spec_with_bmcs(folder: Path, bmcs: list[dict[str, object]]) -> Path:
    """A Slurm spec: controller ctl1 (no BMC) and compute nodes cpu1, cpu2, behind ``bmcs[0]`` and ``bmcs[1]``."""
    hardware = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 4000}
    groups: list[dict[str, object]] = [
        {"name": "ctl", "hosts": "ctl1", "address_start": "192.0.2.10", "roles": ["controller", "accounting-db"]}
    ]
    for i, bmc in enumerate(bmcs[:2], start=1):
        groups.append({"name": f"cpu{i}", "hosts": f"cpu{i}", "addresses": [f"192.0.2.2{i}"],
                       "roles": ["compute"], "hardware": hardware, "bmc": bmc})  # fmt: skip
    data = {"cluster": {"name": "t", "scheduler": "slurm"}, "node_groups": groups,
            "slurm": {"partitions": [{"name": "batch", "nodes": "cpu1,cpu2"}]}}  # fmt: skip
    path = folder / "cluster.yaml"
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


def write_spec(
    folder: Path, emu: Emulator, fingerprint: str | None = None, cred: str = "bmc.cred", first: int = 0
) -> Path:
    """The two-node spec, each compute node the emulator's own system (Redfish, the certificate pinned):
    cpu1 and cpu2 are ``emu.systems[first]`` and the next one."""
    bmcs: list[dict[str, object]] = [
        {"addresses": ["127.0.0.1"], "port": emu.port, "credentials_file": cred,
         "tls_fingerprint": fingerprint or emu.fingerprint, "system_id": system}
        for system in emu.systems[first : first + 2]
    ]  # fmt: skip
    return spec_with_bmcs(folder, bmcs)
