"""Layer 2, nvidia-driver: the pinned driver, nouveau off, persistence daemon, fabric manager, CUDA toolkit."""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import Layer, LayerFacts, Service, Step, StepKind
from gpuforge.deploy.layers.nvidia.common import (
    DRACUT_CONF,
    INITRAMFS_CONF,
    REBOOT_MARKER,
    apt_install,
    dnf_install,
    keep_reports,
    mark_reboot,
    unavailable_step,
    verify_version_command,
)
from gpuforge.deploy.nvidia_needs import (
    Ctx,
    cuda_toolkit_package,
    driver_install,
    driver_packages,
    fabric_manager_from_cuda_repo,
    fabric_manager_package,
    fabric_manager_packages,
)
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import (
    NOUVEAU_BLACKLIST,
    PERSISTENCED_DROPIN,
    host_driver,
)
from gpuforge.render.nvidia_repos import driver_source
from gpuforge.spec.model import DriverSource


def gpu_service_state(ctx: Ctx) -> bool | None:
    """Whether services that need the GPU driver should run: True when the pinned driver is
    loaded, False (enabled, not started) when a GPU waits for its driver, None (left alone)
    when there is no GPU or another driver version is loaded until the reboot."""
    hf = ctx.host
    if not hf.gpu_present:
        return None
    if not hf.driver_loaded:
        return False
    if host_driver(ctx.spec) and hf.loaded_driver != ctx.driver_version:
        return None
    return True


def driver_layer(ctx: Ctx) -> Layer:
    """Driver at the pin, nouveau blacklisted, persistence daemon, fabric manager, CUDA toolkit."""
    if not ctx.gpu_node or not host_driver(ctx.spec):
        return Layer.empty("nvidia-driver")
    s, n, hf = ctx.spec, ctx.node, ctx.host
    ver = ctx.driver_version
    source = driver_source(s, n)
    cuda = src.cuda_repo(s, ctx.platform)
    wrong_arch = _wrong_arch(ctx)
    driver_ok = (source is DriverSource.DISTRO or cuda.available) and wrong_arch is None
    fm = n.hardware.nvswitch
    fm_ok = fm and (cuda.available or not fabric_manager_from_cuda_repo(ctx))
    toolkit_pkg = cuda_toolkit_package(ctx)
    packages: list[str] = []
    if ctx.deb:
        if driver_ok:
            packages += driver_packages(ctx)
        if fm_ok:
            packages += fabric_manager_packages(ctx)
    # The CUDA toolkit is installed by a step of its own, not with the layer's packages: an install
    # of those restarts the layer's services, and nvidia-fabricmanager's exit aborts running CUDA
    # jobs (Fabric Manager User Guide: ABORT_CUDA_JOBS_ON_FM_EXIT, 1 by default).
    watch = (toolkit_pkg,) if ctx.deb and toolkit_pkg and cuda.available else ()
    services: list[Service] = []
    state = gpu_service_state(ctx)
    if state is not None:
        services.append(Service("nvidia-persistenced", running=state, restart_on=(PERSISTENCED_DROPIN,)))
        if fm_ok and hf.nvswitches:
            services.append(Service("nvidia-fabricmanager", running=state))
    initramfs_conf = INITRAMFS_CONF if ctx.deb else DRACUT_CONF
    files = ctx.file(NOUVEAU_BLACKLIST)
    files += ctx.file(PERSISTENCED_DROPIN)

    def version_of(facts: LayerFacts, pkg: str) -> str | None:
        return facts.packages.get(pkg) if ctx.deb else hf.packages.get(pkg)

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not driver_ok:
            steps.append(unavailable_step(f"NVIDIA driver {ver}", wrong_arch or cuda.reason))
        if fm and not fm_ok:
            steps.append(unavailable_step(fabric_manager_package(ctx), cuda.reason))
        if toolkit_pkg and not cuda.available:
            steps.append(unavailable_step(toolkit_pkg, cuda.reason))
        if NOUVEAU_BLACKLIST in changed:
            steps.append(initramfs_step(ctx.deb, facts.contents.get(initramfs_conf) is not None))
        main = driver_install(ctx).version_package
        installed = version_of(facts, main) if driver_ok else None
        if driver_ok:
            version_steps = driver_version_steps(ctx, main, installed)
            reboots = [st.summary for st in version_steps if st.kind == "reboot-required"]
            steps += [st for st in version_steps if st.kind != "reboot-required"]
            steps += mark_reboot(reboots, facts.contents.get(REBOOT_MARKER))
        if fm_ok:
            steps += fabric_manager_steps(ctx, version_of(facts, fabric_manager_package(ctx)))
        if toolkit_pkg and cuda.available and version_of(facts, toolkit_pkg) is None:
            install = apt_install([toolkit_pkg]) if ctx.deb else dnf_install([toolkit_pkg])
            steps.append(Step(StepKind.INSTALL, f"install {toolkit_pkg}", install))
        return keep_reports(ctx, "nvidia-driver:before", steps)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        return keep_reports(ctx, "nvidia-driver:after", driver_notes(ctx, state is not None))

    return Layer(
        "nvidia-driver",
        packages=tuple(packages),
        watch_packages=watch,
        files=files,
        services=tuple(services),
        read_paths=(initramfs_conf, REBOOT_MARKER),
        before_services=before,
        after=after,
    )


def _wrong_arch(ctx: Ctx) -> str | None:
    """Why the node's packages would be for another CPU (``uname -m`` is not the group's ``arch``)."""
    machine, arch = ctx.host.machine, ctx.node.arch
    if machine is None or machine == arch.value:
        return None
    return f"{ctx.node.name} runs {machine} but its node group says arch: {arch.value} (fix the spec)"


def driver_notes(ctx: Ctx, services_managed: bool) -> list[Step]:
    """What the node's state leaves undone after the driver layer (no GPU, driver not loaded, ...)."""
    n, hf, ver = ctx.node, ctx.host, ctx.driver_version
    fm = n.hardware.nvswitch
    steps: list[Step] = []
    gpus = f"{n.hardware.gpu_count} x {n.hardware.gpu.model}" if n.hardware.gpu else "GPUs"
    if not hf.gpu_present:
        steps.append(
            Step(
                StepKind.NOTE,
                f"no NVIDIA GPU on the PCI bus of {n.name} (the spec declares {gpus}): "
                "nvidia-persistenced is not started, the driver cannot load here",
            )
        )
    elif not hf.driver_loaded:
        steps.append(Step(StepKind.NOTE, "NVIDIA kernel driver not loaded: GPU services start after the reboot"))
    elif not services_managed:
        steps.append(
            Step(StepKind.NOTE, f"driver {hf.loaded_driver} is loaded, not {ver}: GPU services are left as they are")
        )
    if hf.secure_boot:
        steps.append(
            Step(
                StepKind.NOTE,
                "UEFI Secure Boot is on: the DKMS-built NVIDIA modules are not signed with a key the firmware "
                "trusts and will not load; enroll the DKMS key (mokutil --import) or turn Secure Boot off",
            )
        )
    if fm and not hf.nvswitches:
        steps.append(
            Step(
                StepKind.NOTE,
                "the spec declares NVSwitch but none is on the PCI bus: nvidia-fabricmanager not started",
            )
        )
    return steps


def initramfs_step(deb: bool, tool_present: bool) -> Step:
    """Rebuild the initramfs after the nouveau blacklist changed (when the node has the tool)."""
    tool, cmd = ("update-initramfs", "update-initramfs -u") if deb else ("dracut", "dracut -f")
    summary = f"rebuild the initramfs ({cmd}): {NOUVEAU_BLACKLIST} changed"
    if not tool_present:
        summary = f"{tool} is not installed now: the initramfs is rebuilt only if the packages bring it"
    command = (
        f"if command -v {tool} >/dev/null 2>&1; then {cmd}; "
        f"else echo 'gpuforge: {tool} not installed: no initramfs to rebuild'; fi"
    )
    return Step(StepKind.INITRAMFS, summary, command)


def driver_version_steps(ctx: Ctx, main: str, installed: str | None) -> list[Step]:
    """Install checks, upgrade/downgrade of a different version, and reboot reports."""
    ver, hf, steps = ctx.driver_version, ctx.host, []
    pkgs = list(driver_packages(ctx))
    if ctx.deb and installed is None:
        steps.append(
            Step(
                StepKind.VERIFY, f"check {main} is at {ver} after the install", verify_version_command(main, ver, True)
            )
        )
    elif not ctx.deb and installed is None:
        row = driver_install(ctx)
        steps.append(
            Step(
                StepKind.INSTALL,
                f"install the NVIDIA driver {ver} (dnf module nvidia-driver:{row.dnf_stream}, {row.packages[0]}, "
                "version-locked; dkms and the running kernel's headers first)",
                rhel_driver_command(ctx, upgrade=False),
            )
        )
    elif not src.version_matches(installed, ver):
        if ctx.deb:
            cmd = (
                f"{apt_install(pkgs, downgrades=True, update_first=True)} && {verify_version_command(main, ver, True)}"
            )
        else:
            cmd = rhel_driver_command(ctx, upgrade=True)
        steps.append(Step(StepKind.UPGRADE, f"NVIDIA driver {installed} -> {ver} (drain the node first)", cmd))
        steps.append(
            Step(StepKind.REBOOT_REQUIRED, f"driver {installed} -> {ver}: reboot to load the new kernel module")
        )
        return steps
    if installed is None and hf.gpu_present and hf.loaded_driver != ver:
        steps.append(Step(StepKind.REBOOT_REQUIRED, f"driver {ver} installed: reboot to load it"))
    elif installed is not None and hf.loaded_driver and hf.loaded_driver != ver:
        steps.append(
            Step(
                StepKind.REBOOT_REQUIRED,
                f"kernel module {hf.loaded_driver} is loaded, {ver} is installed: reboot to load it",
            )
        )
    elif installed is not None and hf.gpu_present and not hf.driver_loaded:
        steps.append(Step(StepKind.REBOOT_REQUIRED, f"driver {ver} is installed but not loaded: reboot to load it"))
    return steps


def versionlock_patterns(ctx: Ctx) -> list[str]:
    """dnf versionlock patterns holding the driver (and fabric manager) at the pin (NVIDIA's
    version-locking page locks ``*nvidia*<branch>*``; gpuforge locks the exact version)."""
    ver = ctx.driver_version
    return [f"*nvidia*-{ver}-*", f"cuda-drivers-{ver}-*"]


def rhel_driver_command(ctx: Ctx, upgrade: bool) -> str:
    """RHEL 9: prerequisites, the branch's module stream, a version lock on the exact version, then
    the metapackage at that version.

    The lock comes first: the metapackage names only itself at the pin, and what it requires
    (``nvidia-driver``, the kmod, the libraries) would otherwise resolve to the stream's newest
    point release; locked, dnf can only take the pinned one (``versionlock add`` matches the
    repository's packages, and fails when no package has that version)."""
    row, ver = driver_install(ctx), ctx.driver_version
    locks = " ".join(shlex.quote(p) for p in versionlock_patterns(ctx))
    parts = [
        dnf_install(["python3-dnf-plugin-versionlock", *row.prerequisites]),
        f"dnf -y module reset nvidia-driver && dnf -y module enable nvidia-driver:{row.dnf_stream}",
        f"dnf versionlock add {locks}",
        f"dnf -y install --allowerasing {' '.join(shlex.quote(f'{p}-{ver}') for p in row.packages)}",
        f"{{ {verify_version_command(row.version_package, ver, False)}; }}",
    ]
    if upgrade:
        parts.insert(0, "{ dnf versionlock delete '*nvidia*' 'cuda-drivers*' >/dev/null 2>&1 || true; }")
    return " && ".join(parts)


def fabric_manager_steps(ctx: Ctx, installed: str | None) -> list[Step]:
    """nvidia-fabricmanager at exactly the driver version."""
    ver, pkg = ctx.driver_version, fabric_manager_package(ctx)
    if installed is None:
        if ctx.deb:  # installed by the planner with the packages, held to the driver pin
            return [
                Step(
                    StepKind.VERIFY,
                    f"check {pkg} is at {ver} after the install",
                    verify_version_command(pkg, ver, True),
                )
            ]
        cmd = f"{dnf_install([f'{pkg}-{ver}'])} && {verify_version_command(pkg, ver, False)}"
        return [Step(StepKind.INSTALL, f"install {pkg} {ver} (must equal the driver)", cmd)]
    if src.version_matches(installed, ver):
        return []
    if ctx.deb:
        cmd = f"{apt_install([pkg], downgrades=True, update_first=True)} && {verify_version_command(pkg, ver, True)}"
    else:
        cmd = f"dnf -y install --allowerasing {pkg}-{ver} && {verify_version_command(pkg, ver, False)}"
    return [Step(StepKind.UPGRADE, f"{pkg} {installed} -> {ver} (must equal the driver)", cmd)]
