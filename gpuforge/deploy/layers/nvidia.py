"""NVIDIA host stack: driver, container engine and toolkit, enroot + pyxis, MIG, DCGM.

Every host runs the same eight operations in this order (empty layers where a node does
not need one, which costs no round trip):

1. nvidia-repos: apt/dnf sources and version pins (Debian non-free, NVIDIA's CUDA and
   libnvidia-container repositories, from ``sources``)
2. nvidia-driver: driver packages at the pin, nouveau blacklist (+ initramfs), persistence
   daemon, fabric manager on NVSwitch boards, optional CUDA toolkit
3. container-engine: containerd or docker with the rendered configs (nvidia runtime)
4. nvidia-container-toolkit: the four toolkit packages pinned together, the CDI spec
5. enroot: release packages and configs
6. pyxis: built on the node against the installed Slurm, only when a version changes
7. nvidia-mig: nvidia-mig-manager and the node's layout (a new layout is a rolling change)
8. nvidia-dcgm: DCGM and dcgm-exporter

Decisions come from facts: ``NvidiaHost`` (GPUs on the PCI bus, loaded driver; one round
trip per GPU node) when the layers are built, the batched layer facts when they are planned.
What a run cannot do itself is recorded for the orchestrator and shown by ``gpuforge plan``
as steps without a command: ``reboot-required``, ``rolling`` (drain first), ``unavailable``
(the spec's sources cannot provide a component) and ``note``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.apt import APT_UPDATE, install_command
from gpuforge.deploy.context import node, run_state, spec
from gpuforge.deploy.converge import REPORTS, Directory, Layer, LayerFacts, Service, Step, StepKind
from gpuforge.deploy.facts.nvidia import NvidiaHost
from gpuforge.deploy.needs import (
    DCGM_PACKAGES,
    TOOLKIT_PACKAGES,
    Ctx,
    cuda_repo_wanted,
    cuda_toolkit_package,
    dcgm_wanted,
    driver_packages,
    fabric_manager_package,
    host_packages,
    needs_host_facts,
    rhel_driver_stream,
    toolkit_wanted,
)
from gpuforge.deploy.operations.layer import converge
from gpuforge.deploy.runstate import RunState
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile
from gpuforge.render.nvidia import (
    CONTAINERD_CONFIG,
    CONTAINERD_DROPIN_DIR,
    CONTAINERD_NVIDIA_DROPIN,
    DCGM_COUNTERS_CSV,
    DCGM_EXPORTER_BIN,
    DCGM_EXPORTER_UNIT,
    DOCKER_DAEMON_JSON,
    ENROOT_CONF,
    ENROOT_TMPFILES,
    MIG_CONFIG,
    MIG_MANAGER_DROPIN,
    NOUVEAU_BLACKLIST,
    PERSISTENCED_DROPIN,
    USERNS_SYSCTL,
    host_dcgm_exporter,
    host_driver,
)
from gpuforge.render.nvidia_repos import driver_source, enroot_wanted, nvidia_repo_files, pyxis_wanted
from gpuforge.render.slurm import plugin_dir
from gpuforge.spec.model import ContainerEngine, DriverSource
from gpuforge.spec.roles import deploys_for

STATE_DIR = "/var/lib/gpuforge"
CDI_SPEC = "/etc/cdi/nvidia.yaml"
CDI_MARKER = f"{STATE_DIR}/cdi.generated"
PYXIS_MARKER = f"{STATE_DIR}/pyxis.built"
DCGM_EXPORTER_MARKER = f"{STATE_DIR}/dcgm-exporter.version"
# The orchestrator (gpuforge.orchestrate.apply.reboot_if_needed) reboots drained nodes that carry it.
REBOOT_MARKER = f"{STATE_DIR}/reboot-required"
INITRAMFS_CONF = "/etc/initramfs-tools/initramfs.conf"
DRACUT_CONF = "/etc/dracut.conf"

# --------------------------------------------------------------------------- records for the orchestrator


def pyxis_rebuilt(run: RunState, host_name: str) -> bool:
    """pyxis was (re)built on ``host_name`` in this run: slurmd must restart to load it."""
    return any(p.endswith("/spank_pyxis.so") for p in run.changed_paths(host_name, "pyxis"))


def _record(ctx: Ctx, key: str, steps: list[Step]) -> list[Step]:
    """Keep this layer's steps a person must read (``converge.REPORTS``) in the run's reports."""
    ctx.run.record_report(ctx.name, key, [s for s in steps if s.kind in REPORTS])
    return steps


# --------------------------------------------------------------------------- shared step helpers


def _q(path: str) -> str:
    return shlex.quote(path)


def verify_version_command(package: str, version: str, deb: bool) -> str:
    query = f"dpkg-query -W -f='${{Version}}' {package}" if deb else f"rpm -q --qf '%{{VERSION}}' {package}"
    return (
        f'v=$({query} 2>/dev/null); case "${{v#*:}}" in {version}|{version}-*) ;; '
        f"*) echo \"{package} is '$v' after the install, the spec pins {version}: "
        f'is {version} in the configured repositories?" >&2; exit 1;; esac'
    )


def apt_install(packages: list[str], downgrades: bool = False, update_first: bool = False) -> str:
    return install_command(packages, downgrades=downgrades, update_first=update_first)


def dnf_install(packages: list[str]) -> str:
    return "dnf -y install " + " ".join(shlex.quote(p) for p in packages)


def _unavailable(what: str, reason: str | None) -> Step:
    return Step(StepKind.UNAVAILABLE, f"{what} not installed: {reason}")


def mark_reboot(reasons: list[str], marker: str | None) -> list[Step]:
    """``reboot-required`` steps; each reason not yet in the node's marker file is added to it."""
    have = set((marker or "").splitlines())
    steps = []
    for reason in reasons:
        line = reason.replace("'", "")
        cmd = None
        if line not in have:
            cmd = (
                f"install -d -m 0755 {STATE_DIR} && touch {REBOOT_MARKER} && "
                f"{{ grep -qxF '{line}' {REBOOT_MARKER} || echo '{line}' >> {REBOOT_MARKER}; }}"
            )
        steps.append(Step(StepKind.REBOOT_REQUIRED, reason, cmd))
    return steps


def _upload(path: str, data: bytes, mode: str = "0644") -> RenderedFile:
    return RenderedFile(path, data, mode=mode)


# --------------------------------------------------------------------------- 1. repositories


def repos_layer(ctx: Ctx) -> Layer:
    """Sources and pins for the node's NVIDIA packages; ``apt-get update`` when they change."""
    if not ctx.gpu_node:
        return Layer.empty("nvidia-repos")
    s = ctx.spec
    files: list[RenderedFile] = []
    read: list[str] = []
    distro = host_driver(s) and driver_source(s, ctx.node) is DriverSource.DISTRO
    cuda = src.cuda_repo(s, ctx.os) if cuda_repo_wanted(ctx) else None
    container = src.container_repo(s, ctx.os) if toolkit_wanted(ctx) else None
    repos = [r for r in (cuda, container) if r is not None and r.available]
    for r in repos:
        if r.bundle is not None:
            files += [_upload(f"{r.url}/{rel}", data) for rel, data in src.bundle_files(r.bundle)]
    files += nvidia_repo_files(s, ctx.node)
    if ctx.deb:
        if cuda is not None and cuda.available and cuda.bundle is None:
            read.append(src.CUDA_KEYRING)
        if container is not None and container.available and container.bundle is None:
            read.append(src.CONTAINER_KEYRING)
        if distro:
            read += [*src.NODE_APT_SOURCES, src.DEBIAN_NONFREE_SOURCES]
    repo_paths = {f.path for f in files}

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if distro and ctx.deb:
            node_sources = [facts.contents.get(p) or "" for p in src.NODE_APT_SOURCES]
            want = src.debian_nonfree_sources(node_sources, s.sources.mirrors.debian)
            have = facts.contents.get(src.DEBIAN_NONFREE_SOURCES)
            if want is not None and have != want:
                f = _upload(src.DEBIAN_NONFREE_SOURCES, want.encode())
                steps.append(Step(StepKind.UPLOAD, f"write {f.path} (contrib non-free non-free-firmware)", upload=f))
                changed.add(f.path)
            elif want is None and have is not None:
                steps.append(
                    Step(
                        StepKind.REMOVE,
                        f"remove {src.DEBIAN_NONFREE_SOURCES} (the node's own sources carry non-free now)",
                        f"rm -f {src.DEBIAN_NONFREE_SOURCES}",
                    )
                )
                changed.add(src.DEBIAN_NONFREE_SOURCES)
        cuda_key = ctx.deb and cuda is not None and cuda.available and cuda.bundle is None
        if cuda is not None and cuda_key and facts.contents.get(src.CUDA_KEYRING) is None:
            a = src.cuda_keyring_artifact(cuda)
            cmd = (
                f'{src.fetch_command(a)} && d=$(mktemp -d) && dpkg-deb -x {_q(a.node_path)} "$d" && '
                f'install -m 0644 "$d{src.CUDA_KEYRING}" {src.CUDA_KEYRING} && rm -rf "$d"'
            )
            steps.append(Step(StepKind.KEYRING, f"CUDA repository key from {a.url} ({src.CUDA_KEYRING})", cmd))
            changed.add(src.CUDA_KEYRING)
        ctr_key = ctx.deb and container is not None and container.available and container.bundle is None
        if container is not None and ctr_key and facts.contents.get(src.CONTAINER_KEYRING) is None:
            cmd = (
                f"curl -fsSL --retry 3 --connect-timeout 20 -o {src.CONTAINER_KEYRING}.part "
                f"{_q(container.key_url or '')} && mv {src.CONTAINER_KEYRING}.part {src.CONTAINER_KEYRING}"
            )
            steps.append(Step(StepKind.KEYRING, f"container toolkit repository key from {container.key_url}", cmd))
            changed.add(src.CONTAINER_KEYRING)
        touched = changed & (repo_paths | {src.DEBIAN_NONFREE_SOURCES, src.CUDA_KEYRING, src.CONTAINER_KEYRING})
        if touched:
            if ctx.deb:
                steps.append(Step(StepKind.APT_UPDATE, "apt-get update (NVIDIA package sources changed)", APT_UPDATE))
            else:
                steps.append(
                    Step(StepKind.DNF_MAKECACHE, "dnf makecache (NVIDIA repositories changed)", "dnf -q -y makecache")
                )
        return _record(ctx, "nvidia-repos", steps)

    return Layer("nvidia-repos", early_files=files, read_paths=tuple(read), after=after)


# --------------------------------------------------------------------------- 2. driver


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
    cuda = src.cuda_repo(s, ctx.os)
    driver_ok = source is DriverSource.DISTRO or cuda.available
    fm = n.hardware.nvswitch
    toolkit_pkg = cuda_toolkit_package(ctx)
    packages: list[str] = []
    if ctx.deb:
        if driver_ok:
            packages += driver_packages(ctx)
        if fm and cuda.available:
            packages.append(fabric_manager_package(ctx))
        if toolkit_pkg and cuda.available:
            packages.append(toolkit_pkg)
    services: list[Service] = []
    state = gpu_service_state(ctx)
    if state is not None:
        services.append(Service("nvidia-persistenced", running=state, restart_on=(PERSISTENCED_DROPIN,)))
        if fm and hf.nvswitches and cuda.available:
            services.append(Service("nvidia-fabricmanager", running=state))
    initramfs_conf = INITRAMFS_CONF if ctx.deb else DRACUT_CONF
    files = ctx.file(NOUVEAU_BLACKLIST)
    files += ctx.file(PERSISTENCED_DROPIN)

    def version_of(facts: LayerFacts, pkg: str) -> str | None:
        return facts.packages.get(pkg) if ctx.deb else hf.packages.get(pkg)

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not driver_ok:
            steps.append(_unavailable(f"NVIDIA driver {ver}", cuda.reason))
        if fm and not cuda.available:
            steps.append(_unavailable("nvidia-fabricmanager", cuda.reason))
        if toolkit_pkg and not cuda.available:
            steps.append(_unavailable(toolkit_pkg, cuda.reason))
        if NOUVEAU_BLACKLIST in changed:
            steps.append(initramfs_step(ctx.deb, facts.contents.get(initramfs_conf) is not None))
        main = driver_packages(ctx)[0] if ctx.deb else "nvidia-driver"
        installed = version_of(facts, main) if driver_ok else None
        if driver_ok:
            version_steps = driver_version_steps(ctx, main, installed)
            reboots = [st.summary for st in version_steps if st.kind == "reboot-required"]
            steps += [st for st in version_steps if st.kind != "reboot-required"]
            steps += mark_reboot(reboots, facts.contents.get(REBOOT_MARKER))
        if fm and cuda.available:
            steps += fabric_manager_steps(ctx, version_of(facts, fabric_manager_package(ctx)))
        if not ctx.deb and toolkit_pkg and cuda.available and hf.packages.get(toolkit_pkg) is None:
            steps.append(Step(StepKind.INSTALL, f"install {toolkit_pkg}", dnf_install([toolkit_pkg])))
        return _record(ctx, "nvidia-driver:before", steps)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
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
        elif state is None:
            steps.append(
                Step(
                    StepKind.NOTE, f"driver {hf.loaded_driver} is loaded, not {ver}: GPU services are left as they are"
                )
            )
        if fm and not hf.nvswitches:
            steps.append(
                Step(
                    StepKind.NOTE,
                    "the spec declares NVSwitch but none is on the PCI bus: nvidia-fabricmanager not started",
                )
            )
        return _record(ctx, "nvidia-driver:after", steps)

    return Layer(
        "nvidia-driver",
        packages=tuple(packages),
        files=files,
        services=tuple(services),
        read_paths=(initramfs_conf, REBOOT_MARKER),
        before_services=before,
        after=after,
    )


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
        stream = rhel_driver_stream(ctx)
        cmd = f"dnf -y module install nvidia-driver:{stream} && {verify_version_command('nvidia-driver', ver, False)}"
        steps.append(
            Step(StepKind.INSTALL, f"install the NVIDIA driver {ver} (dnf module nvidia-driver:{stream})", cmd)
        )
    elif not src.version_matches(installed, ver):
        if ctx.deb:
            cmd = (
                f"{apt_install(pkgs, downgrades=True, update_first=True)} && {verify_version_command(main, ver, True)}"
            )
        else:
            stream = rhel_driver_stream(ctx)
            cmd = (
                f"dnf -y module reset nvidia-driver && dnf -y module install --allowerasing nvidia-driver:{stream} && "
                f"{verify_version_command('nvidia-driver', ver, False)}"
            )
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


# --------------------------------------------------------------------------- 3. container engine


def engine_layer(ctx: Ctx) -> Layer:
    """containerd or docker with the rendered config; restarted only when it changes."""
    engine = ctx.spec.container_runtime.engine
    if engine is ContainerEngine.CONTAINERD:
        files = ctx.file(CONTAINERD_CONFIG) + ctx.file(CONTAINERD_NVIDIA_DROPIN)
        pkg, unit = ("containerd", "containerd") if ctx.deb else ("containerd.io", "containerd")
        dirs: tuple[Directory, ...] = (Directory("/etc/containerd"), Directory(CONTAINERD_DROPIN_DIR))
    elif engine is ContainerEngine.DOCKER:
        files = ctx.file(DOCKER_DAEMON_JSON)
        pkg, unit = ("docker.io", "docker") if ctx.deb else ("docker-ce", "docker")
        dirs = (Directory("/etc/docker"),)
    else:
        return Layer.empty("container-engine")
    if not files:
        return Layer.empty("container-engine")
    paths = tuple(f.path for f in files)
    engine_present = ctx.deb or ctx.host.packages.get(pkg) is not None
    services = (Service(unit, restart_on=paths),) if engine_present else ()
    nvidia_runtime = CONTAINERD_NVIDIA_DROPIN in paths or (
        DOCKER_DAEMON_JSON in paths and b'"nvidia"' in ctx.files[DOCKER_DAEMON_JSON].data
    )

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not engine_present:
            steps.append(
                _unavailable(
                    pkg, f"{pkg} comes from Docker's repository on {ctx.os.value}, which gpuforge does not manage"
                )
            )
        if nvidia_runtime and ctx.spec.container_runtime.nvidia_default:
            repo = src.container_repo(ctx.spec, ctx.os)
            if not repo.available:
                steps.append(
                    Step(
                        StepKind.WARNING,
                        f"nvidia is the default runtime but the container toolkit has no source ({repo.reason})",
                    )
                )
        return _record(ctx, "container-engine", steps)

    return Layer(
        "container-engine",
        packages=(pkg,) if ctx.deb else (),
        directories=dirs,
        files=files,
        services=services,
        after=after,
    )


# --------------------------------------------------------------------------- 4. container toolkit


def toolkit_layer(ctx: Ctx) -> Layer:
    """The four toolkit packages pinned together; the CDI spec when it is missing or stale."""
    if not toolkit_wanted(ctx):
        return Layer.empty("nvidia-container-toolkit")
    s, hf = ctx.spec, ctx.host
    ver = s.versions.container_toolkit
    repo = src.container_repo(s, ctx.os)
    cdi = s.container_runtime.cdi
    pinned = [f"{p}={ver}-1" for p in TOOLKIT_PACKAGES] if ctx.deb else [f"{p}-{ver}-1" for p in TOOLKIT_PACKAGES]
    driver = ctx.driver_version if host_driver(s) else (hf.loaded_driver or "operator")
    want_marker = f"{ver} {driver}"

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not repo.available:
            steps.append(_unavailable(f"NVIDIA container toolkit {ver}", repo.reason))
            return _record(ctx, "nvidia-container-toolkit", steps)
        have = {p: (facts.packages.get(p) if ctx.deb else hf.packages.get(p)) for p in TOOLKIT_PACKAGES}
        wrong = {p: v for p, v in have.items() if v is not None and not src.version_matches(v, ver)}
        missing = [p for p, v in have.items() if v is None]
        if not ctx.deb and missing:
            steps.append(
                Step(StepKind.INSTALL, f"install the NVIDIA container toolkit {ver} (4 packages)", dnf_install(pinned))
            )
        if wrong:
            old = ", ".join(sorted(set(wrong.values())))
            cmd = (
                apt_install(pinned, downgrades=True)
                if ctx.deb
                else f"dnf -y install --allowerasing {' '.join(shlex.quote(p) for p in pinned)}"
            )
            steps.append(
                Step(StepKind.UPGRADE, f"NVIDIA container toolkit {old} -> {ver} (all 4 packages together)", cmd)
            )
        if cdi:
            spec_missing = facts.contents.get(CDI_SPEC) is None
            stale = (facts.contents.get(CDI_MARKER) or "").strip() != want_marker
            if spec_missing or stale or missing or wrong:
                why = f"{CDI_SPEC} missing" if spec_missing else f"toolkit/driver now {want_marker}"
                if hf.driver_loaded and (not host_driver(s) or hf.loaded_driver == ctx.driver_version):
                    cmd = (
                        f"install -d -m 0755 /etc/cdi {STATE_DIR} && nvidia-ctk cdi generate --output={CDI_SPEC} && "
                        f"printf '%s\\n' {shlex.quote(want_marker)} > {CDI_MARKER}"
                    )
                    steps.append(Step(StepKind.CDI, f"generate the CDI spec ({why})", cmd))
                else:
                    steps.append(
                        Step(
                            StepKind.NOTE,
                            f"CDI spec not generated ({why}): the driver {ctx.driver_version} is not loaded here",
                        )
                    )
        return _record(ctx, "nvidia-container-toolkit", steps)

    return Layer(
        "nvidia-container-toolkit",
        packages=tuple(pinned) if ctx.deb and repo.available else (),
        read_paths=(CDI_SPEC, CDI_MARKER) if cdi else (),
        after=after,
    )


# --------------------------------------------------------------------------- 5. enroot


def enroot_layer(ctx: Ctx) -> Layer:
    """enroot + enroot+caps from release files; its configs; user namespaces on."""
    if not enroot_wanted(ctx.spec, ctx.node):
        return Layer.empty("enroot")
    ver = ctx.spec.versions.enroot
    arts = src.enroot_artifacts(ctx.spec, ctx.os)
    pushed = [_upload(a.node_path, src.bundle_files_single(a.local)) for a in arts if a.local]
    files = ctx.file(ENROOT_CONF) + ctx.file(ENROOT_TMPFILES) + ctx.file(USERNS_SYSCTL)
    names = ["enroot", "enroot+caps"]

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        missing = [a for a in arts if not a.available]
        have = {p: ctx.host.packages.get(p) for p in names}
        if missing:
            steps.append(_unavailable(f"enroot {ver}", "; ".join(a.reason or a.name for a in missing)))
        elif any(not src.version_matches(v, ver) for v in have.values()) or any(a.node_path in changed for a in arts):
            fetch = " && ".join(src.fetch_command(a) for a in arts)
            paths = [a.node_path for a in arts]
            install = apt_install(paths, downgrades=True) if ctx.deb else dnf_install(paths)
            where = "the bundle" if arts[0].local else (arts[0].url or "").rsplit("/", 1)[0]
            now = ", ".join(f"{p} {v}" for p, v in have.items() if v) or "not installed"
            steps.append(Step(StepKind.INSTALL, f"enroot {ver} from {where} (now: {now})", f"{fetch} && {install}"))
        if ENROOT_TMPFILES in changed:
            steps.append(
                Step(
                    StepKind.TMPFILES,
                    "create enroot's shared directories",
                    f"systemd-tmpfiles --create {ENROOT_TMPFILES}",
                )
            )
        if USERNS_SYSCTL in changed:
            steps.append(
                Step(
                    StepKind.SYSCTL,
                    "allow user namespaces (user.max_user_namespaces)",
                    f"sysctl -q -p {USERNS_SYSCTL} || echo 'gpuforge: {USERNS_SYSCTL} applies at the next boot "
                    "(/proc/sys is read-only here)'",
                )
            )
        return _record(ctx, "enroot", steps)

    return Layer(
        "enroot",
        early_files=pushed,
        directories=(Directory("/etc/enroot"),),
        files=files,
        before_services=before,
    )


# --------------------------------------------------------------------------- 6. pyxis


def pyxis_layer(ctx: Ctx) -> Layer:
    """pyxis built against the installed Slurm, only when the pyxis or Slurm version changes.

    The build records ``"<pyxis version> <slurm version>"`` in ``PYXIS_MARKER``; a rebuild
    adds the plugin path to the layer's changed paths in the run's records, so the Slurm
    compute layer restarts slurmd (``pyxis_rebuilt``).
    """
    if not pyxis_wanted(ctx.spec, ctx.node):
        return Layer.empty("pyxis")
    ver = ctx.spec.versions.pyxis
    a = src.pyxis_artifact(ctx.spec)
    plugin = f"{plugin_dir(ctx.os)}/spank_pyxis.so"
    dev = "libslurm-dev" if ctx.deb else "slurm-devel"
    packages = ("gcc", "make", dev, "curl", "ca-certificates") if ctx.deb else ()
    pushed = [_upload(a.node_path, src.bundle_files_single(a.local))] if a.local else []
    query = f"dpkg-query -W -f='${{Version}}' {dev}" if ctx.deb else f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {dev}"

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not a.available:
            steps.append(_unavailable(f"pyxis {ver}", a.reason))
            return _record(ctx, "pyxis", steps)
        if not ctx.deb:
            need = [p for p in ("gcc", "make", dev) if ctx.host.packages.get(p) is None]
            if need:
                steps.append(Step(StepKind.INSTALL, f"install {', '.join(need)} (pyxis build)", dnf_install(need)))
        slurm = facts.packages.get(dev) if ctx.deb else ctx.host.packages.get(dev)
        built = (facts.contents.get(PYXIS_MARKER) or "").strip()
        if slurm is not None and built == f"{ver} {slurm}":
            return _record(ctx, "pyxis", steps)
        was = f" (built: {built})" if built else ""
        against = f"Slurm {slurm}" if slurm else f"the Slurm headers ({dev}) installed now"
        cmd = (
            "set -e; d=$(mktemp -d); trap 'rm -rf \"$d\"' EXIT; "
            f'{src.fetch_command(a)}; tar -xzf {_q(a.node_path)} -C "$d" --strip-components=1; '
            f'make -s -C "$d" VERSION={shlex.quote(ver)}; '
            f'install -D -m 0644 "$d/spank_pyxis.so" {_q(plugin)}; '
            f"sv=$({query}); install -d -m 0755 {STATE_DIR}; "
            f"printf '%s %s\\n' {shlex.quote(ver)} \"$sv\" > {PYXIS_MARKER}"
        )
        steps.append(
            Step(StepKind.BUILD, f"build pyxis {ver} against {against} into {plugin}{was}; slurmd restarts", cmd)
        )
        changed.add(plugin)
        return _record(ctx, "pyxis", steps)

    return Layer("pyxis", packages=packages, early_files=pushed, read_paths=(PYXIS_MARKER,), after=after)


# --------------------------------------------------------------------------- 7. MIG


def mig_layer(ctx: Ctx) -> Layer:
    """nvidia-mig-manager with the node's layout; a new layout waits for a drain (rolling)."""
    if not ctx.gpu_node or not ctx.node.mig_config:
        return Layer.empty("nvidia-mig")
    repo = src.cuda_repo(ctx.spec, ctx.os)
    files = ctx.file(MIG_CONFIG) + ctx.file(MIG_MANAGER_DROPIN)
    name = ctx.node.mig_config
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
        if not repo.available:
            steps.append(_unavailable("nvidia-mig-manager", repo.reason))
        installed = facts.packages.get("nvidia-mig-manager") if ctx.deb else ctx.host.packages.get("nvidia-mig-manager")
        if repo.available and installed is None:
            if not ctx.deb:
                steps.append(Step(StepKind.INSTALL, "install nvidia-mig-manager", dnf_install(["nvidia-mig-manager"])))
            steps.append(
                Step(
                    StepKind.ENABLE,
                    "enable nvidia-mig-manager (applies the layout at every boot)",
                    "systemctl enable nvidia-mig-manager.service",
                )
            )
        if changed & {MIG_CONFIG, MIG_MANAGER_DROPIN}:
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
        return _record(ctx, "nvidia-mig", steps)

    return Layer(
        "nvidia-mig",
        packages=("nvidia-mig-manager",) if ctx.deb and repo.available else (),
        directories=(Directory("/etc/nvidia-mig-manager"),),
        files=files,
        after=after,
    )


# --------------------------------------------------------------------------- 8. DCGM


def dcgm_layer(ctx: Ctx) -> Layer:
    """DCGM 4 at the pin (nvidia-dcgm) and dcgm-exporter with the rendered unit and counters."""
    if not dcgm_wanted(ctx):
        return Layer.empty("nvidia-dcgm")
    s, hf = ctx.spec, ctx.host
    ver = s.versions.dcgm
    repo = src.cuda_repo(s, ctx.os)
    exporter = host_dcgm_exporter(s)
    binary = src.dcgm_exporter_artifact(s) if exporter else None
    files = ctx.file(DCGM_COUNTERS_CSV) + ctx.file(DCGM_EXPORTER_UNIT)
    if binary is not None and binary.local:
        files.append(_upload(DCGM_EXPORTER_BIN, src.bundle_files_single(binary.local), mode="0755"))
    ready = gpu_service_state(ctx)
    services: list[Service] = []
    if ready is not None and repo.available:
        services.append(Service("nvidia-dcgm", running=ready))
    if exporter and ready is not None and binary is not None and binary.available:
        services.append(
            Service(
                "dcgm-exporter", running=ready, restart_on=(DCGM_EXPORTER_UNIT, DCGM_COUNTERS_CSV, DCGM_EXPORTER_BIN)
            )
        )
    pinned = [f"{p}-{ver}" for p in DCGM_PACKAGES]

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not repo.available:
            steps.append(_unavailable(f"DCGM {ver}", repo.reason))
        else:
            have = {p: (facts.packages.get(p) if ctx.deb else hf.packages.get(p)) for p in DCGM_PACKAGES}
            if not ctx.deb and any(v is None for v in have.values()):
                steps.append(Step(StepKind.INSTALL, f"install DCGM {ver}", dnf_install(pinned)))
            wrong = sorted({v for v in have.values() if v is not None and not src.version_matches(v, ver)})
            if wrong:
                cmd = apt_install(list(DCGM_PACKAGES), downgrades=True) if ctx.deb else dnf_install(pinned)
                steps.append(Step(StepKind.UPGRADE, f"DCGM {', '.join(wrong)} -> {ver}", cmd))
        if binary is not None and not binary.available:
            steps.append(_unavailable(f"dcgm-exporter {s.versions.dcgm_exporter}", binary.reason))
        elif binary is not None and binary.url is not None:
            have_ver = (facts.contents.get(DCGM_EXPORTER_MARKER) or "").strip()
            if have_ver != s.versions.dcgm_exporter:
                cmd = (
                    f"{src.fetch_command(binary)} && install -m 0755 {_q(binary.node_path)} {DCGM_EXPORTER_BIN} && "
                    f"install -d -m 0755 {STATE_DIR} && printf '%s\\n' {shlex.quote(s.versions.dcgm_exporter)} "
                    f"> {DCGM_EXPORTER_MARKER}"
                )
                old = f" (was {have_ver})" if have_ver else ""
                steps.append(
                    Step(StepKind.INSTALL, f"dcgm-exporter {s.versions.dcgm_exporter} from {binary.url}{old}", cmd)
                )
                changed.add(DCGM_EXPORTER_BIN)
        if not hf.gpu_present:
            steps.append(
                Step(StepKind.NOTE, "no NVIDIA GPU on the PCI bus: nvidia-dcgm and dcgm-exporter are not started")
            )
        return _record(ctx, "nvidia-dcgm", steps)

    return Layer(
        "nvidia-dcgm",
        packages=tuple(DCGM_PACKAGES) if ctx.deb and repo.available else (),
        directories=(Directory("/etc/dcgm-exporter"),) if exporter else (),
        files=files,
        services=tuple(services),
        read_paths=(DCGM_EXPORTER_MARKER,) if binary is not None and binary.url is not None else (),
        before_services=before,
    )


# --------------------------------------------------------------------------- the deploy

LAYERS: tuple[tuple[str, Callable[[Ctx], Layer]], ...] = (
    ("package sources and pins", repos_layer),
    ("driver", driver_layer),
    ("container engine", engine_layer),
    ("container toolkit and CDI", toolkit_layer),
    ("enroot", enroot_layer),
    ("pyxis", pyxis_layer),
    ("MIG", mig_layer),
    ("DCGM and dcgm-exporter", dcgm_layer),
)
LAYER_NAMES = (
    "nvidia-repos",
    "nvidia-driver",
    "container-engine",
    "nvidia-container-toolkit",
    "enroot",
    "pyxis",
    "nvidia-mig",
    "nvidia-dcgm",
)


def nvidia_layers(ctx: Ctx | None) -> list[tuple[str, Layer]]:
    """The eight layers of a node in the fixed order (empty ones where it needs none)."""
    out = []
    for (title, build), name in zip(LAYERS, LAYER_NAMES, strict=True):
        out.append((title, build(ctx) if ctx is not None else Layer.empty(name)))
    return out


@deploy("gpuforge nvidia")
def nvidia() -> None:
    s = spec()
    n = node()
    ctx = None
    if "nvidia" in deploys_for(n):
        hf = host.get_fact(NvidiaHost, packages=host_packages(s, n)) if needs_host_facts(s, n) else HostFacts()
        ctx = Ctx.build(s, n, hf, host.name, run_state())
    for title, layer in nvidia_layers(ctx):
        converge(name=f"nvidia: {title}", layer=layer)
