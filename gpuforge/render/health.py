"""The health check a node gets: the program and ``/etc/gpuforge/health.json``.

The config is a pure function of the spec and the node. The node-local checker reads nothing
else, so the same dict drives ``gpuforge health`` on the node and the node part of
``gpuforge validate``; the program is the checker built into one file (``node_program``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from gpuforge.render.files import REDACTED, LocalSource, RenderedFile, Secrets
from gpuforge.render.health_fabric import fabric_health_config
from gpuforge.render.node_program import node_program
from gpuforge.render.nvidia import (
    CONTAINERD_CONFIG,
    CONTAINERD_NVIDIA_DROPIN,
    DOCKER_DAEMON_JSON,
    MIG_CONFIG,
    NVIDIA_RUNTIME_BIN,
    host_dcgm_exporter,
    host_toolkit,
)
from gpuforge.spec.model import ContainerEngine, Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import ROLE_DEPLOYS

HEALTH_PROGRAM = "/usr/local/sbin/gpuforge-health"
HEALTH_CONFIG = "/etc/gpuforge/health.json"
#: The node's own HMAC key (0600 root): the health check's keyed digests of files holding credentials.
HEALTH_KEY = "/etc/gpuforge/health.key"
#: What a rendering without the real secrets (plans' and ``render``'s) holds where a keyed digest goes.
HMAC_REDACTED = "<redacted: HMAC-SHA256 under the node's health key>"
_HMAC_VALUE = re.compile(r'("hmac": )"[0-9a-f]{64}"')
MUNGE_KEY = "/etc/munge/munge.key"
SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"
#: Core dcgm-exporter metrics (all in its default counters) expected when the spec lists none.
DCGM_CORE_METRICS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS")


def holds_credentials(f: RenderedFile) -> bool:
    """A file whose content is or carries a secret: a secret (the munge key, slurmdbd.conf) or a
    file shown redacted (Alertmanager's config with its webhook URLs)."""
    return f.secret or f.redact is not None


def node_health_key(cluster_key: bytes, node: str) -> bytes:
    """``node``'s HMAC key, derived from the cluster's stored health key: the hex HMAC-SHA256 of the
    node's name and a newline. These are the key file's exact bytes, and the node keys with them as
    they are; one node's key says nothing of another's (or of the cluster's)."""
    mac = hmac.new(cluster_key, b"gpuforge-health-key\0" + node.encode(), hashlib.sha256)
    return (mac.hexdigest() + "\n").encode()


def keyed_digest(key: bytes, data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under the node's ``key``, in hex: what the node's probe computes
    (``gpuforge.probes.files.keyed_digest``, which render may not import: the reproducer in
    tests/security/test_health_keyed_digest.py holds the two to the same digest)."""
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def hide_hmacs(text: str) -> str:
    """The health config as plans and diffs show it: every keyed digest replaced by a placeholder."""
    return _HMAC_VALUE.sub(rf'\1"{HMAC_REDACTED}"', text)


def managed_manifest(files: list[RenderedFile], key: bytes | None = None) -> list[dict[str, Any]]:
    """What the health check compares the node's managed files with: path, owner, group, mode and,
    for a rendered text without credentials, its ``sha256``; for one holding credentials its
    ``hmac`` under the node's ``key`` (a placeholder without the key), never a plain digest a word
    list could reverse to a password. A file copied from the control host: owner and mode only."""
    out = []
    for f in sorted(files, key=lambda f: f.path):
        local, creds = isinstance(f.content, LocalSource), holds_credentials(f)
        sha = hashlib.sha256(f.data).hexdigest() if not (local or creds) else None
        mac = (keyed_digest(key, f.data) if key else HMAC_REDACTED) if creds and not local else None
        entry = {"path": f.path, "sha256": sha, "hmac": mac}
        out.append(entry | {"mode": f.mode.zfill(4), "owner": f.owner, "group": f.group})
    return out


def health_config(spec: Spec, node: Node, managed: list[RenderedFile], key: bytes | None = None) -> dict[str, Any]:
    """The node-local check configuration of ``node`` (JSON-serialisable, stable key order).

    ``config_files`` lists ``managed``: every other file gpuforge writes on the node
    (``gpuforge.render.render_managed``), so the health check finds a hand edit without the spec;
    ``key``: the node's HMAC key (:func:`node_health_key`; None: keyed digests are placeholders).
    """
    gpu = node.hardware.gpu
    drv = spec.versions.driver
    cfg: dict[str, Any] = {
        "schema_version": 1,
        "cluster": spec.cluster.name,
        "node": node.name,
        "roles": sorted(r.value for r in node.roles),
        "gpu": None,
        "driver_version": drv.version if drv and gpu else None,
        "mig": None,
        "container": None,
        "slurm": None,
        "kubernetes": None,
        "dcgm": None,
        "node_exporter": {"enabled": spec.monitoring.node_exporter, "port": spec.monitoring.node_exporter_port},
        "platform": _platform_config(node),
        "fabric": fabric_health_config(spec, node),
        "config_files": managed_manifest(managed, key),
        "hmac_key": HEALTH_KEY,
    }
    cfg.update(_gpu_config(spec, node))
    runs_containers = node.roles & {Role.COMPUTE, Role.K8S_WORKER, Role.K8S_CONTROL_PLANE}
    engine = spec.container_runtime.engine
    if runs_containers and engine is not ContainerEngine.NONE:
        docker = engine is ContainerEngine.DOCKER
        cfg["container"] = {
            "engine": engine.value,
            "toolkit_on_host": host_toolkit(spec),
            "config_file": DOCKER_DAEMON_JSON if docker else CONTAINERD_CONFIG,
            "containerd_dropin": None if docker else CONTAINERD_NVIDIA_DROPIN,
            "runtime_bin": NVIDIA_RUNTIME_BIN,
            "test_image": None,
        }
    if spec.slurm is not None and node.roles & {Role.CONTROLLER, Role.COMPUTE, Role.LOGIN, Role.ACCOUNTING_DB}:
        s = spec.slurm
        cfg["slurm"] = {
            "controller": node.has(Role.CONTROLLER),
            "compute": node.has(Role.COMPUTE),
            "login": node.has(Role.LOGIN),
            "accounting_db": node.has(Role.ACCOUNTING_DB) and s.accounting.enabled,
            "pyxis": s.containers.pyxis,
            "health_check_interval": s.health_check.interval if s.health_check.enabled else 0,
            "munge_key": MUNGE_KEY,
            "slurmdbd_conf": SLURMDBD_CONF,
        }
    if spec.kubernetes is not None and node.roles & {Role.K8S_CONTROL_PLANE, Role.K8S_WORKER}:
        cfg["kubernetes"] = {
            "control_plane": node.has(Role.K8S_CONTROL_PLANE),
            "worker": node.has(Role.K8S_WORKER),
        }
    cfg.update(_hardware_config(spec, node))
    return cfg


def _gpu_config(spec: Spec, node: Node) -> dict[str, Any]:
    """The ``gpu``, ``mig`` and ``dcgm`` entries of a GPU node's health config (none for a CPU node)."""
    gpu, model = node.hardware.gpu, node.gpu_model
    if gpu is None or model is None:
        return {}
    cfg: dict[str, Any] = {}
    cfg["gpu"] = {
        "count": gpu.count,
        "model": gpu.model,
        "gres_type": model.gres_type,
        "pci_device_ids": [d.lower() for d in model.pci_device_ids],
        "nvswitch": node.hardware.nvswitch,
        # The catalog's MIG-capable models are data-center GPUs with ECC memory: ECC reported
        # off or unreadable on them is a fault (gpu.ecc), not a reason to skip.
        "ecc_expected": model.supports_mig,
    }
    if node.mig_config:
        layout = spec.mig.configs.get(node.mig_config, [])
        profiles = sorted({name for entry in layout for name in entry.mig_devices})
        cfg["mig"] = {"config": node.mig_config, "file": MIG_CONFIG, "profiles": profiles}
    cfg["dcgm"] = {
        "enabled": spec.dcgm.enabled,
        "diag_level": spec.dcgm.diag_level,
        "exporter": host_dcgm_exporter(spec),
        "exporter_port": spec.dcgm.exporter_port,
        "counters": list(spec.dcgm.counters or DCGM_CORE_METRICS),
    }
    return cfg


def _hardware_config(spec: Spec, node: Node) -> dict[str, Any]:
    """``hardware``: a slurmd node's figures as its NodeName line has them (validator hardware.figures)."""
    hw = node.hardware
    if spec.slurm is None or not node.has(Role.COMPUTE) or hw.missing_figures:
        return {}
    return {"hardware": {k: getattr(hw, k) for k in hw.FIGURES}}


def wants_health(spec: Spec, node: Node) -> bool:
    """Slurm nodes whose roles take the health layer (``gpuforge.spec.roles.ROLE_DEPLOYS``)."""
    return spec.slurm is not None and any("health" in ROLE_DEPLOYS[r] for r in node.roles)


def health_config_text(spec: Spec, node: Node, managed: list[RenderedFile], key: bytes | None = None) -> str:
    return json.dumps(health_config(spec, node, managed, key), indent=2, sort_keys=True) + "\n"


def health_files(spec: Spec, node: Node, secrets: Secrets | None, managed: list[RenderedFile]) -> list[RenderedFile]:
    """The health check's program, config and HMAC key (none on nodes without the health layer);
    ``managed``: the node's other files as ``gpuforge.render.render_managed`` gives them with the same
    ``secrets`` (real ones: the keyed digests are of what the node really gets). The config and the
    key are root's only; the config shows its digests hidden, the key is a secret (never shown)."""
    if not wants_health(spec, node):
        return []
    key = node_health_key(secrets.health_key, node.name) if secrets is not None and secrets.health_key else None
    config = health_config_text(spec, node, managed, key)
    return [
        RenderedFile(HEALTH_PROGRAM, node_program(), mode="0755"),
        RenderedFile(HEALTH_CONFIG, config, mode="0600", redact=hide_hmacs, keyed=True),
        RenderedFile(HEALTH_KEY, key or REDACTED.encode(), mode="0600", secret=True),
    ]


def _platform_config(node: Node) -> dict[str, str]:
    """What the node must run: its platform row's os-release ID and VERSION_ID, and ``uname -m``."""
    platform = node.platform
    os_id, version = platform.distribution.os_release
    return {"title": platform.distribution.title, "os_id": os_id, "version_id": version, "arch": platform.arch.value}
