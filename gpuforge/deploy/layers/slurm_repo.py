"""The repository of gpuforge's Slurm build on each Slurm node (``slurm.source: build``).

The control host's finished build of the node's platform (``render.slurm_build``) is pushed as a flat
apt repository: its signed ``InRelease``, ``Packages`` and debs under ``REPO_ON_NODE/<key>/``, the
build's public key where the source's ``Signed-By`` names it, and the source itself; the package index
is refreshed when any of them changes. On an rpm node: the rpms and ``repodata/`` (``repomd.xml.asc``),
the armored key under ``/etc/pki/rpm-gpg`` and a ``.repo`` file naming it (``render.slurm_build_rpm``).
The packages are then installed by the Slurm layers with
SchedMD's names, held at ``versions.slurm``.

Invariant: a node is only ever given a complete build (the cache folder holds one or nothing); before
the build exists the layer reports that it is missing and pushes nothing.
"""

from __future__ import annotations

from pathlib import Path

from gpuforge.deploy.converge import Layer, LayerFacts, Step, StepKind, refresh_step
from gpuforge.render import slurm_build as rb
from gpuforge.render.files import LocalSource, RenderedFile
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.platforms import PackageFormat
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.state_dir import state_root


def repo_files(inputs: rb.BuildInputs, folder: Path) -> list[RenderedFile]:
    """What a node gets from a complete build folder (empty when the build is not there yet): every
    file of the repository (an rpm build's ``repodata/`` too), the key, the package manager's source."""
    if not (folder / rb.RECORD_FILE).is_file():
        return []
    on_node = f"{rb.REPO_ON_NODE}/{inputs.key}"
    repo = folder / rb.REPO_FOLDER
    files = [
        RenderedFile(f"{on_node}/{p.relative_to(repo).as_posix()}", LocalSource(str(p)))
        for p in sorted(repo.rglob("*"))
        if p.is_file()
    ]
    key, source = rb.node_paths(inputs)
    files.append(RenderedFile(key, LocalSource(str(folder / rb.NODE_KEY_FILE[inputs.format]))))
    files.append(RenderedFile(source, rb.source_text(inputs)))
    files += [RenderedFile(path, text) for path, text in rb.wait_for_config_dropins()]
    return files


def slurm_repo_layer(s: Spec, n: Node, root: Path | None = None) -> Layer:
    """The build's repository on a Slurm node of a cluster whose Slurm gpuforge builds."""
    inputs = rb.inputs_for(s, n) if "slurm" in deploys_for(n) else None
    if inputs is None:
        return Layer.empty("slurm-repo")
    folder = rb.build_folder(root or state_root(), inputs)
    files = repo_files(inputs, folder)
    watched = {f.path for f in files}

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if not files:
            return [
                Step(
                    StepKind.BUILD,
                    f"SchedMD's Slurm {inputs.version} for {inputs.platform} is not built yet: apply builds it on "
                    f"{inputs.host} before any node converges",
                )
            ]
        if changed & watched:
            rpm = inputs.format is PackageFormat.RPM
            return [refresh_step(rpm, f"gpuforge's Slurm {inputs.version} build ({inputs.key})")]
        return []

    return Layer("slurm-repo", early_files=files, after=after)
