"""Layer 7, nvidia-mig: nvidia-mig-manager and the node's MIG layout (a new layout is a rolling change).

nvidia-mig-manager is a release file of NVIDIA/mig-parted (.deb/.rpm), not a CUDA-repository
package; it is fetched (or pushed from the bundle) and installed at ``versions.mig_manager``.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Step, StepKind
from gpuforge.deploy.layers.nvidia.common import (
    REBOOT_MARKER,
    STATE_DIR,
    apt_install,
    dnf_install,
    keep_reports,
    unavailable_step,
    upload_file,
)
from gpuforge.deploy.nvidia_needs import (
    Ctx,
)
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import (
    MIG_CONFIG,
    MIG_MANAGER_DROPIN,
)


def _layout(config: str | None, name: str) -> Any:
    """The entries of layout ``name`` in a mig-parted config file (None: not there, or no config)."""
    try:
        doc = yaml.safe_load(config or "")
    except yaml.YAMLError:
        return None
    configs = doc.get("mig-configs") if isinstance(doc, dict) else None
    return configs.get(name) if isinstance(configs, dict) else None


def layout_kept(name: str, new: dict[str, str], old: dict[str, str | None]) -> bool:
    """Whether the node's files already select layout ``name`` with the same entries (``new``: the
    files as written now, ``old``: as read on the node; both by path). The config file holds every
    layout that fits the GPUs, the drop-in more than the choice (the CDI hook): a change elsewhere
    in them leaves the node's layout as it is."""
    selecting = [line for line in new[MIG_MANAGER_DROPIN].splitlines() if "MIG_PARTED_SELECTED_CONFIG=" in line]
    old_dropin = (old.get(MIG_MANAGER_DROPIN) or "").splitlines()
    if not selecting or selecting[0] not in old_dropin:
        return False
    entries = _layout(new[MIG_CONFIG], name)
    return entries is not None and _layout(old.get(MIG_CONFIG), name) == entries


def mig_layer(ctx: Ctx) -> Layer:
    """nvidia-mig-manager with the node's layout; a new layout waits for a drain (rolling)."""
    if not ctx.gpu_node or not ctx.node.mig_config:
        return Layer.empty("nvidia-mig")
    ver = ctx.spec.versions.mig_manager
    release = src.mig_manager_artifact(ctx.spec, ctx.platform)
    pushed = [upload_file(release.node_path, src.bundle_files_single(release.local))] if release.local else []
    files = ctx.file(MIG_CONFIG) + ctx.file(MIG_MANAGER_DROPIN)
    name = ctx.node.mig_config
    written = {f.path: f.data.decode() for f in files}
    later = f"MIG layout {name} waits for the next boot (nvidia-mig-manager applies it)"
    mark = (
        f"install -d -m 0755 {STATE_DIR} && touch {REBOOT_MARKER} && "
        f"{{ grep -qxF '{later}' {REBOOT_MARKER} || echo '{later}' >> {REBOOT_MARKER}; }}"
    )
    # Applied now only on idle GPUs (a rolling rollout drained the node); otherwise, or when
    # mig-parted cannot reset the GPUs (e.g. nvidia_drm holds them), at the next boot.
    apply_cmd = (
        "if nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -q .; then "
        f"echo 'gpuforge: GPU processes are running'; {mark}; "
        "elif systemctl restart nvidia-mig-manager.service && "
        f"nvidia-mig-parted assert -f {MIG_CONFIG} -c {shlex.quote(name)}; then :; "
        f"else echo 'gpuforge: MIG layout not applied now'; {mark}; fi"
    )

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        installed = ctx.host.packages.get("nvidia-mig-manager")
        if not release.available:
            steps.append(unavailable_step(f"nvidia-mig-manager {ver}", release.reason))
        elif not src.version_matches(installed, ver) or release.node_path in changed:
            install = apt_install([release.node_path], downgrades=True) if ctx.deb else dnf_install([release.node_path])
            where = "the bundle" if release.local else release.url
            now = f" (now: {installed})" if installed else ""
            steps.append(
                Step(
                    StepKind.INSTALL,
                    f"nvidia-mig-manager {ver} from {where}{now}",
                    f"{src.fetch_command(release)} && {install}",
                )
            )
            if installed is None:
                steps.append(
                    Step(
                        StepKind.ENABLE,
                        "enable nvidia-mig-manager (applies the layout at every boot)",
                        "systemctl enable nvidia-mig-manager.service",
                    )
                )
        on_node = {path: facts.contents.get(path) for path in written}
        kept = len(written) == 2 and layout_kept(name, written, on_node)
        if changed & {MIG_CONFIG, MIG_MANAGER_DROPIN} and not kept:
            if ctx.host.gpu_present:
                reason = f"MIG layout {name!r} changed"
                steps.append(
                    Step(
                        StepKind.ROLLING,
                        f"{reason}: apply it on idle GPUs (the rollout drains {ctx.node.name} first); "
                        "busy GPUs get it at the next boot (reboot-required)",
                        apply_cmd,
                    )
                )
            else:
                steps.append(Step(StepKind.NOTE, f"MIG layout {name!r} written; no GPU on the PCI bus to apply it to"))
        return keep_reports(ctx, "nvidia-mig", steps)

    return Layer(
        "nvidia-mig",
        early_files=pushed,
        directories=(Directory("/etc/nvidia-mig-manager"),),
        files=files,
        read_paths=(MIG_CONFIG, MIG_MANAGER_DROPIN),
        after=after,
    )
