"""What the fabric layers install on a node from NVIDIA's repositories and as release files.

The offline bundle gathers it beside the NVIDIA deploy's (``downloads.spec_needs``), so that a spec in
offline mode installs its fabric from the bundle alone:

- DOCA-OFED (``stack: doca``): ``doca-ofed`` and its closure from the pinned release's repository
  (``apt/doca`` / ``rpm/doca``: ``render.fabric.doca_repo``); ``libibverbs-dev`` too where the
  NCCL-RDMA-SHARP plugin is built (fabric_packages doca-ubuntu-verbs-dev: DOCA's, not the OS's, so it
  matches DOCA's libibverbs). The repository's key must be ``fabric.doca_key_fingerprint``, the key the
  nodes check too: without it the bundle refuses the repository, naming the field;
- NCCL at the pinned build from NVIDIA's CUDA repository, with the apt pin the nodes carry
  (``render.fabric.nccl_pin``);
- GDRCopy's packages and the source archives of nccl-tests and the SHARP plugin, as release files
  (sha256 known beforehand, as every release file in a bundle).

The distribution's own packages (rdma-core, perftest, OpenMPI, PMIx, the build tools) come from the
OS archive, as every layer's do: the bundle records them as external, it does not carry them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuforge.bundle.resolve import Pin, Want
from gpuforge.render import fabric as fr
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import Spec
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.fabric import RdmaStack
from gpuforge.spec.fabric_rules import fabric_of, nccl_cuda
from gpuforge.spec.nodes import Node

#: Built by the SHARP plugin's build from DOCA's repository (SHARP_PLUGIN_BUILD_DEPS, doca-ubuntu-verbs-dev).
DOCA_BUILD_PACKAGES = ("libibverbs-dev",)


@dataclass
class FabricNeeds:
    """One node's fabric downloads: DOCA's repository and wants, NCCL's wants and pins in the CUDA
    repository (none: no NCCL on the node), and the release files."""

    doca_repo: src.Repo | None = None
    doca_wants: list[Want] = field(default_factory=list)
    doca_fingerprint: str | None = None
    nccl_wants: list[Want] = field(default_factory=list)
    nccl_pins: list[Pin] = field(default_factory=list)
    artifacts: list[src.Artifact] = field(default_factory=list)


def fabric_needs(spec: Spec, node: Node) -> FabricNeeds:
    """What ``node``'s fabric layers fetch, as ``spec`` (already in its fetch mode) sources it."""
    out = FabricNeeds()
    f = fabric_of(spec, node)
    if f is None:
        return out
    if f.stack is RdmaStack.DOCA:
        repo = fr.doca_repo(spec, node.platform, f)
        why = f"DOCA-OFED {f.doca_version}"
        out.doca_wants = [Want(p, (), why) for p in table.DOCA_PACKAGES]
        if fr.sharp_plugin_wanted(spec, node, f) and node.os.is_deb:
            build = f"the NCCL-RDMA-SHARP plugin {f.sharp_plugin} build"
            out.doca_wants += [Want(p, (), build) for p in DOCA_BUILD_PACKAGES]
        if repo.url is not None and f.doca_key_fingerprint is None:
            reason = (
                f"node {node.name}: fabric.doca_key_fingerprint is not set: the bundle checks DOCA-OFED's "
                "repository signature against it, as the nodes do"
            )
            repo = src.Repo(repo.kind, reason=reason)
        out.doca_repo, out.doca_fingerprint = repo, f.doca_key_fingerprint
    cuda = nccl_cuda(spec, f)
    if fr.gpu_fabric(spec, node) and f.nccl is not None and cuda is not None:
        pinned = [p.split("=", 1) for p in table.nccl_packages(node.os.is_deb, f.nccl, cuda)]  # as the layer pins
        out.nccl_wants = [Want(name, (version,), f"NCCL {version}") for name, version in pinned]
        if node.os.is_deb:
            out.nccl_pins = [Pin(tuple(name for name, _ in pinned), tuple(dict.fromkeys(v for _, v in pinned)))]
    out.artifacts = fr.release_files(spec, node, f)
    return out
