"""Rendering: the spec in, every node's files out (pure functions, deterministic)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gpuforge.render.base import base_files
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.health import health_config, health_files
from gpuforge.render.slurm import slurm_files
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node, resolve_nodes

LayerRenderer = Callable[[Spec, Node, Secrets], list[RenderedFile]]

# Optional layers are looked up by module/function name so each renderer stays in its own room.
_OPTIONAL = (
    ("gpuforge.render.nvidia", "nvidia_files"),
    ("gpuforge.render.nvidia_repos", "nvidia_repo_files"),
    ("gpuforge.render.kubernetes", "kubernetes_files"),
    ("gpuforge.render.k8s_packages", "kubernetes_package_files"),
    ("gpuforge.render.kubeadm", "kubeadm_files"),
    ("gpuforge.render.k8s_maintenance", "maintenance_files"),
    ("gpuforge.render.monitoring", "monitoring_files"),
    ("gpuforge.render.storage", "storage_files"),
    ("gpuforge.render.fabric", "fabric_files"),
)


def layer_renderers() -> list[LayerRenderer]:
    renderers: list[LayerRenderer] = []
    for module, fn in _OPTIONAL:
        renderers.append(getattr(importlib.import_module(module), fn))
    return renderers


def render_managed(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[RenderedFile]:
    """Every file ``node`` gets but the health check's own two (whose config lists these files)."""
    sec = secrets or Secrets.redacted()
    files = list(base_files(spec, node))
    if spec.slurm is not None:
        files += slurm_files(spec, node, sec)
    for renderer in layer_renderers():
        files += renderer(spec, node, sec)
    return sorted(files, key=lambda f: f.path)


def render_node(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[RenderedFile]:
    """Every file ``node`` gets, all layers; secrets redacted unless given."""
    files = render_managed(spec, node, secrets)
    return sorted([*files, *health_files(spec, node, secrets, managed=files)], key=lambda f: f.path)


def node_health_config(spec: Spec, node: Node) -> dict[str, Any]:
    """``node``'s health config as its ``/etc/gpuforge/health.json`` holds it."""
    return health_config(spec, node, render_managed(spec, node))


def render_cluster(spec: Spec, secrets: Secrets | None = None) -> dict[str, list[RenderedFile]]:
    """Files per node name."""
    return {n.name: render_node(spec, n, secrets) for n in resolve_nodes(spec)}
