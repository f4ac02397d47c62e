"""Cross-field rules of the GPUs: the driver, the platform of each group, DCGM and MIG layouts.

The driver is pinned where GPUs are and installs on each group's platform; a Grace GPU runs on
aarch64 and some GPUs only with the open kernel modules; DCGM's packages exist for the driver's
CUDA major; a MIG config fits its GPU model and lays out each GPU once. Each problem names its
field; registered in :mod:`gpuforge.spec.rules` (``RULES``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gpuforge.spec import nvidia_packages
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.gpus import GPU_MODELS, MEMORY_SLICES, GpuModel
from gpuforge.spec.k8s_model import operator_dcgm_exporter
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import DriverFlavor, DriverSource, MigDevices, MigStrategy, NodeGroup, Role, SourceMode, Spec
from gpuforge.spec.platforms import Arch, UnsupportedPlatform, platform_for


def no_mig_message(model: str, group: str) -> str:
    """The refusal of a MIG layout on a GPU without MIG: that first, then the fix and the GPUs that have it."""
    mig_models = ", ".join(name for name, m in GPU_MODELS.items() if m.supports_mig)
    return f"{model} does not support MIG: drop mig_config from group {group!r} (GPUs with MIG: {mig_models})"


def gpu_driver_rules(spec: Spec) -> Iterator[SpecIssue]:
    has_gpu = any(g.hardware.gpu for g in spec.node_groups)
    drv = spec.versions.driver
    for gi, group in enumerate(spec.node_groups):
        if group.hardware.nvswitch and not group.hardware.gpu:
            yield SpecIssue(("node_groups", gi, "hardware", "nvswitch"), "NVSwitch without GPUs: set hardware.gpu")
    if has_gpu and drv is None:
        yield SpecIssue(("versions", "driver"), "GPU nodes are declared, so a driver version must be pinned")
    if drv is None:
        return
    if drv.fabric_manager is not None and drv.fabric_manager != drv.version:
        yield SpecIssue(
            ("versions", "driver", "fabric_manager"),
            f"fabric manager {drv.fabric_manager} must equal the driver version {drv.version}",
        )
    reported: set[str] = set()
    for group in spec.node_groups:
        if not group.hardware.gpu:
            continue
        os_family = group.os or spec.cluster.os
        source = drv.source or nvidia_packages.default_source(os_family)
        try:
            nvidia_packages.driver_install(os_family, source, int(drv.branch), drv.flavor)
        except nvidia_packages.UnsupportedDriver as e:
            if str(e) not in reported:
                reported.add(str(e))
                field = "source" if source is DriverSource.DISTRO and os_family.is_rpm else "version"
                yield SpecIssue(("versions", "driver", field), f"group {group.name!r} ({os_family.value}): {e}")


def platform_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Each group's OS on its CPU architecture is a row of the platform table; a Grace GPU model
    (GH200, GB200, GB300) runs on aarch64; GPUs only the open kernel modules drive get them; a
    mirror serving nodes of several architectures names ``{arch}`` in its URL."""
    drv = spec.versions.driver
    arches: set[Arch] = set()
    for gi, group in enumerate(spec.node_groups):
        os_family = group.os or spec.cluster.os
        if group.hardware.gpu:  # GPU nodes are the ones that read NVIDIA's CUDA repository
            arches.add(group.arch)
        try:
            platform_for(os_family, group.arch)
        except UnsupportedPlatform as e:
            yield SpecIssue(("node_groups", gi, "arch"), f"group {group.name!r}: {e}")
        model = GPU_MODELS.get(group.hardware.gpu.model) if group.hardware.gpu else None
        if model is None:
            continue
        if model.host_arch is not None and model.host_arch is not group.arch:
            yield SpecIssue(
                ("node_groups", gi, "arch"),
                f"group {group.name!r}: {model.name} nodes are {model.host_arch.value} (NVIDIA Grace CPU); "
                f"set arch: {model.host_arch.value} (it is {group.arch.value})",
            )
        if model.open_kernel_modules_only and drv is not None and drv.flavor is DriverFlavor.PROPRIETARY:
            yield SpecIssue(
                ("versions", "driver", "flavor"),
                f"group {group.name!r}: {model.name} ({model.architecture}) runs only with NVIDIA's open GPU kernel "
                "modules; set versions.driver.flavor: open",
            )
    mirror = spec.sources.mirrors.nvidia_cuda
    if spec.sources.mode is SourceMode.MIRROR and mirror and len(arches) > 1 and "{arch}" not in mirror:
        yield SpecIssue(
            ("sources", "mirrors", "nvidia_cuda"),
            "GPU nodes of several CPU architectures use this mirror: write {arch} where the URL names the architecture "
            "(NVIDIA's directories are x86_64 and sbsa)",
        )


def dcgm_rules(spec: Spec) -> Iterator[SpecIssue]:
    """DCGM's packages follow the driver's CUDA major and exist at versions.dcgm; the exporter is built for one DCGM."""
    if not spec.dcgm.enabled or not any(g.hardware.gpu for g in spec.node_groups):
        return
    drv = spec.versions.driver
    if drv is not None:
        try:
            missing = nvidia_packages.dcgm_lacks_cuda_packages(int(drv.branch), spec.versions.dcgm)
        except nvidia_packages.UnsupportedDriver as e:
            yield SpecIssue(("versions", "driver", "version"), f"{e}; or set dcgm.enabled: false")
        else:
            if missing:  # the plan would install packages that do not exist at that version
                yield SpecIssue(("versions", "dcgm"), missing)
    host_exporter = spec.dcgm.exporter and (
        spec.kubernetes is None or not operator_dcgm_exporter(spec.kubernetes.gpu_operator, spec.dcgm.enabled)
    )
    built_for = nvidia_packages.dcgm_of_exporter(spec.versions.dcgm_exporter)
    if host_exporter and built_for != spec.versions.dcgm:
        yield SpecIssue(
            ("versions", "dcgm_exporter"),
            f"dcgm-exporter {spec.versions.dcgm_exporter} is built against DCGM {built_for}, but versions.dcgm is "
            f"{spec.versions.dcgm}: pin a dcgm-exporter release '{spec.versions.dcgm}-<exporter version>' "
            f"or set versions.dcgm: {built_for}",
        )


def mig_rules(spec: Spec) -> Iterator[SpecIssue]:
    for name, entries in spec.mig.configs.items():
        for ei, entry in enumerate(entries):
            if not entry.mig_enabled and entry.mig_devices:
                yield SpecIssue(
                    ("mig", "configs", name, ei, "mig_devices"), "mig_devices given but mig_enabled is false"
                )
    used: set[str] = set()
    for gi, group in enumerate(spec.node_groups):
        if group.mig_config is not None:
            used.add(group.mig_config)
            yield from _group_mig_config(spec, gi, group)
    if spec.kubernetes and used and spec.kubernetes.gpu_operator.mig_strategy is MigStrategy.NONE:
        yield SpecIssue(
            ("kubernetes", "gpu_operator", "mig_strategy"),
            "node groups use MIG configs, so mig_strategy must be single or mixed",
        )
    if spec.kubernetes and spec.kubernetes.gpu_operator.mig_strategy is MigStrategy.SINGLE:
        yield from _single_strategy_layouts(spec)


def _group_mig_config(spec: Spec, gi: int, group: NodeGroup) -> Iterator[SpecIssue]:
    """The group's MIG config exists, fits a GPU that has MIG, and each entry lays out its GPUs once."""
    assert group.mig_config is not None
    loc = ("node_groups", gi, "mig_config")
    entries = spec.mig.configs.get(group.mig_config)
    if entries is None:
        known = ", ".join(spec.mig.configs) or "none defined"
        yield SpecIssue(loc, f"MIG config {group.mig_config!r} is not in mig.configs ({known})")
        return
    if group.hardware.gpu is None:
        yield SpecIssue(loc, f"group {group.name!r} has no GPUs, so no MIG config applies")
        return
    model = GPU_MODELS[group.hardware.gpu.model]
    if not model.supports_mig:
        yield SpecIssue(loc, no_mig_message(model.name, group.name))
        return
    claimed: dict[int, int] = {}
    for ei, entry in enumerate(entries):
        eloc = ("mig", "configs", group.mig_config, ei)
        yield from _entry_devices(group, eloc, ei, entry, claimed)
        yield from _entry_layout(group, model, eloc, entry)


def _entry_devices(
    group: NodeGroup, eloc: tuple[str | int, ...], ei: int, entry: MigDevices, claimed: dict[int, int]
) -> Iterator[SpecIssue]:
    """The entry's GPU indices: each once, not laid out by an earlier entry, within the group's GPUs."""
    assert group.hardware.gpu is not None
    count = group.hardware.gpu.count
    indices = list(range(count)) if entry.devices == "all" else entry.devices
    repeated = sorted(d for d, n in Counter(indices).items() if n > 1)
    if repeated:
        yield SpecIssue((*eloc, "devices"), f"GPU index(es) {repeated} listed more than once")
    overlap = sorted({d for d in indices if d in claimed})
    if overlap:
        yield SpecIssue(
            (*eloc, "devices"),
            f"GPU index(es) {overlap} already laid out by entry {claimed[overlap[0]]} of this config",
        )
    for d in indices:
        claimed.setdefault(d, ei)
    if isinstance(entry.devices, list):
        out = [d for d in entry.devices if d >= count or d < 0]
        if out:
            yield SpecIssue(
                (*eloc, "devices"),
                f"GPU index(es) {out} out of range for group {group.name!r} ({count} GPUs: 0-{count - 1})",
            )


def _entry_layout(
    group: NodeGroup, model: GpuModel, eloc: tuple[str | int, ...], entry: MigDevices
) -> Iterator[SpecIssue]:
    """The entry's profiles are the model's, in allowed counts, and fit one GPU's slices."""
    compute = memory = 0
    for profile_name, count in entry.mig_devices.items():
        profile = model.profile(profile_name)
        if profile is None:
            allowed = ", ".join(p.name for p in model.mig_profiles)
            yield SpecIssue(
                (*eloc, "mig_devices", profile_name),
                f"{profile_name!r} is not a MIG profile of {model.name} (group {group.name!r}); allowed: {allowed}",
            )
            continue
        if count < 1 or count > profile.max_count:
            yield SpecIssue(
                (*eloc, "mig_devices", profile_name),
                f"{count} x {profile_name} on one {model.name}: allowed 1..{profile.max_count}",
            )
        compute += profile.compute * count
        memory += profile.memory * count
    if compute > model.compute_slices or memory > MEMORY_SLICES:
        yield SpecIssue(
            (*eloc, "mig_devices"),
            f"layout needs {compute} compute / {memory} memory slices; one {model.name} has "
            f"{model.compute_slices} / {MEMORY_SLICES}",
        )


def _single_strategy_layouts(spec: Spec) -> Iterator[SpecIssue]:
    """The device plugin's ``single`` strategy offers a node's MIG devices as ``nvidia.com/gpu`` only
    when every GPU is in MIG mode with one profile (NVIDIA/k8s-device-plugin ``internal/rm``: "all
    devices on the node must be configured with the same migEnabled value", "more than one MIG device
    type present on node"); otherwise it refuses the node."""
    for gi, group in enumerate(spec.node_groups):
        entries = spec.mig.configs.get(group.mig_config or "")
        if not entries or group.hardware.gpu is None or Role.K8S_WORKER not in group.roles:
            continue
        if not GPU_MODELS[group.hardware.gpu.model].supports_mig:
            continue  # mig_rules says so first
        layout = mig_layout(entries, group.hardware.gpu.count)
        if layout.full_gpus or len(layout.devices) != 1:
            profiles = ", ".join(sorted(layout.devices)) or "none"
            yield SpecIssue(
                ("node_groups", gi, "mig_config"),
                f"MIG config {group.mig_config!r} leaves {layout.full_gpus} of the {layout.gpu_count} GPUs of "
                f"group {group.name!r} outside MIG and uses {len(layout.devices)} profile(s) ({profiles}): "
                "kubernetes.gpu_operator.mig_strategy single needs every GPU in MIG mode with one profile "
                "(the device plugin refuses such a node); use mig_strategy: mixed",
            )
