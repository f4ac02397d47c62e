"""``gpuforge render`` shows every file apply writes: each layer's files, for every node of every
example spec, are among the rendered files with the same bytes (secrets: the same paths).

Left out, by design: the offline bundle's repository contents pushed to the node (copies of
downloaded files, not rendered text), and files written from what is on the node (the
Debian non-free source list, built from the node's own sources in the layer's ``after`` step).
"""

from __future__ import annotations

import pytest

from gpuforge.deploy.layers.base import base_layer
from gpuforge.deploy.layers.health import health_layer
from gpuforge.deploy.layers.kubeadm import control_plane_layer
from gpuforge.deploy.layers.kubernetes import kubernetes_layer
from gpuforge.deploy.layers.monitoring import monitoring_layers
from gpuforge.deploy.layers.munge import munge_layer
from gpuforge.deploy.layers.nvidia import nvidia_layers
from gpuforge.deploy.layers.slurm import accounting_layer, config_layer
from gpuforge.deploy.nvidia_needs import Ctx
from gpuforge.deploy.runstate import RunState
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.render import render_node
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.health import wants_health
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for
from tests.helpers import inventory

EXAMPLES = ["lab", "slurm-h100", "k8s-gpu-operator"]


def layer_files(s: Spec, n: Node, sec: Secrets) -> list[RenderedFile]:
    """Every file the deploy layers write on ``n`` (as built for a fresh node with its GPUs present)."""
    wanted = deploys_for(n)
    layers = [base_layer(s, n), *monitoring_layers(s, n, "monitoring" in wanted)]
    if s.slurm is not None and "slurm" in wanted:
        layers += [munge_layer(sec), config_layer(s, n, sec, n.name, RunState())]
        if n.has(Role.ACCOUNTING_DB) and s.slurm.accounting.enabled:
            layers.append(accounting_layer(s, sec))
    if wants_health(s, n):
        layers.append(health_layer(s, n))
    if "kubernetes" in wanted:
        layers += [kubernetes_layer(s, n), control_plane_layer(s, n, {})]  # keys redacted: compared by path
    if "nvidia" in wanted:
        gpus = ["2330"] * (n.hardware.gpu.count if n.hardware.gpu else 0)
        ctx = Ctx.build(s, n, HostFacts(gpus=gpus, package_tool="dpkg" if n.os.is_deb else "rpm"))
        layers += [layer for _, layer in nvidia_layers(ctx)]
    files = [f for layer in layers for f in (*layer.early_files, *layer.files)]
    return [f for f in files if not f.path.startswith(src.BUNDLE_ON_NODE)]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_file_a_layer_writes_is_rendered(name: str) -> None:
    spec = inventory(name)
    sec = Secrets.redacted()
    checked = 0
    for n in spec_nodes(spec):
        rendered = {f.path: f for f in render_node(spec, n, sec)}
        for f in layer_files(spec, n, sec):
            assert f.path in rendered, f"{n.name}: {f.path} is written by apply but not rendered"
            if not f.secret:
                assert rendered[f.path].data == f.data, f"{n.name}: {f.path} differs from the render"
                assert (rendered[f.path].mode, rendered[f.path].owner) == (f.mode, f.owner), f.path
            checked += 1
    assert checked > 0


def spec_nodes(spec: Spec) -> list[Node]:
    from gpuforge.spec import resolve_nodes

    return resolve_nodes(spec)
