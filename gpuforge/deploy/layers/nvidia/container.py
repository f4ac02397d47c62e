"""Layers 3 and 4: the container engine (containerd or docker) and the NVIDIA container toolkit + CDI."""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Service, Step, StepKind, clear_pending
from gpuforge.deploy.layers.nvidia.common import (
    CDI_MARKER,
    STATE_DIR,
    apt_install,
    dnf_install,
    keep_reports,
    unavailable_step,
)
from gpuforge.deploy.nvidia_needs import (
    TOOLKIT_PACKAGES,
    Ctx,
    toolkit_wanted,
)
from gpuforge.probes.toolkit_config import differing
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile
from gpuforge.render.nvidia import (
    CDI_SPEC,
    CONTAINERD_CONFIG,
    CONTAINERD_DROPIN_DIR,
    CONTAINERD_NVIDIA_DROPIN,
    DOCKER_DAEMON_JSON,
    TOOLKIT_CONFIG,
    TOOLKIT_CONFIG_DEFAULTS,
    UNPRIVILEGED_GPU_SETTINGS,
    host_driver,
    nvidia_default_runtime,
    restrict_unprivileged_gpus,
    toolkit_driver_root,
    toolkit_root_command,
    toolkit_root_is,
)
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import ContainerEngine


def engine_layer(ctx: Ctx) -> Layer:
    """containerd or docker with the rendered config; restarted only when it changes.

    Debian/Ubuntu: the distribution's package; RHEL: Docker's repository (``containerd.io``,
    ``docker-ce``; ``nvidia_packages.SOURCES['docker-rhel']``), installed when missing.
    """
    engine = ctx.spec.container_runtime.engine
    chosen = _engine_files(ctx, engine)
    if chosen is None:
        return Layer.empty("container-engine")
    files, unit, dirs = chosen
    pkg = table.ENGINE_PACKAGES[(engine.value, ctx.deb)]
    repo = None if ctx.deb else src.docker_repo(ctx.spec, ctx.os)
    paths = tuple(f.path for f in files)
    installed = ctx.deb or ctx.host.packages.get(pkg) is not None
    docker = engine is ContainerEngine.DOCKER
    # dockerd stops every container when it exits (live-restore is off by default; containerd's
    # shims keep its containers over a restart), and what gpuforge changes in daemon.json
    # (runtimes, default-runtime) a reload applies (moby daemon/reload.go: "Platform runtime";
    # dockerd(8), configuration reload behavior): a changed daemon.json is reloaded.
    service = (
        Service(unit, reload_on=paths, reload_command="systemctl reload docker")
        if docker
        else Service(unit, restart_on=paths)
    )
    services = (service,) if installed or (repo is not None and repo.available) else ()
    nvidia_runtime = CONTAINERD_NVIDIA_DROPIN in paths or (
        DOCKER_DAEMON_JSON in paths and b'"nvidia"' in ctx.files[DOCKER_DAEMON_JSON].data
    )

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if installed or repo is None:
            return []
        if not repo.available:
            return [unavailable_step(pkg, repo.reason)]
        return [Step(StepKind.INSTALL, f"install {pkg} from Docker's RHEL repository", dnf_install([pkg]))]

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        return keep_reports(ctx, "container-engine", _engine_after(ctx, unit, nvidia_runtime, facts, changed))

    return Layer(
        "container-engine",
        packages=(pkg,) if ctx.deb else (),
        directories=dirs,
        files=files,
        services=services,
        before_services=before,
        after=after,
    )


def _engine_files(ctx: Ctx, engine: ContainerEngine) -> tuple[list[RenderedFile], str, tuple[Directory, ...]] | None:
    """The engine's rendered files, its unit and its folders (None: no engine, or nothing rendered)."""
    chosen: tuple[list[RenderedFile], str, tuple[Directory, ...]]
    if engine is ContainerEngine.CONTAINERD:
        files = ctx.file(CONTAINERD_CONFIG) + ctx.file(CONTAINERD_NVIDIA_DROPIN)
        chosen = (files, "containerd", (Directory("/etc/containerd"), Directory(CONTAINERD_DROPIN_DIR)))
    elif engine is ContainerEngine.DOCKER:
        chosen = (ctx.file(DOCKER_DAEMON_JSON), "docker", (Directory("/etc/docker"),))
    else:
        return None
    return chosen if chosen[0] else None


def _engine_after(ctx: Ctx, unit: str, nvidia_runtime: bool, facts: LayerFacts, changed: set[str]) -> list[Step]:
    """After the files: docker's first daemon.json needs a restart; a default nvidia runtime without
    a toolkit source is a warning."""
    steps: list[Step] = []
    running = (facts.units.get(unit) or {}).get("ActiveState") == "active"
    if unit == "docker" and running and DOCKER_DAEMON_JSON in changed and facts.files.get(DOCKER_DAEMON_JSON) is None:
        # A dockerd that ran without our daemon.json: its exec-opts (cgroup driver) apply only at start.
        steps.append(
            Step(
                StepKind.RESTART,
                f"restart docker (its first {DOCKER_DAEMON_JSON}: exec-opts apply only when it starts)",
                f"systemctl restart docker{clear_pending(unit)}",
            )
        )
    if nvidia_runtime and nvidia_default_runtime(ctx.spec, ctx.node):
        tk_repo = src.container_repo(ctx.spec, ctx.os)
        if not tk_repo.available:
            steps.append(
                Step(
                    StepKind.WARNING,
                    f"nvidia is the default runtime but the container toolkit has no source ({tk_repo.reason})",
                )
            )
    return steps


def toolkit_config_step(current: str | None) -> Step | None:
    """``nvidia-ctk config --in-place --set ...`` where the toolkit's config lacks a setting of
    :data:`UNPRIVILEGED_GPU_SETTINGS` (``current``: the file as read, None when missing).

    nvidia-container-runtime and its hook read the file on every container start, so nothing
    restarts (k8s_upstream.SOURCES "ctk-config").
    """
    todo = differing(current, UNPRIVILEGED_GPU_SETTINGS, TOOLKIT_CONFIG_DEFAULTS)
    if not todo:
        return None
    sets = " ".join(f"--set {k}={str(v).lower()}" for k, v in UNPRIVILEGED_GPU_SETTINGS.items())
    cmd = f"nvidia-ctk config --in-place {sets}"  # the default --config-file is TOOLKIT_CONFIG
    what = ", ".join(f"{k} = {str(v).lower()}" for k, v in todo.items())
    return Step(StepKind.RECONFIGURE, f"{TOOLKIT_CONFIG}: {what} (GPUs only through the device plugin)", cmd)


def toolkit_config_steps(ctx: Ctx, current: str | None) -> list[Step]:
    """The toolkit config's settings: unprivileged containers' GPUs (Kubernetes nodes), then the driver
    root of the GPU Operator's driver container (``driver: operator`` with a host toolkit). The root line
    is written after any ``nvidia-ctk config`` run, which would comment it out again."""
    steps: list[Step] = []
    ctk = toolkit_config_step(current) if restrict_unprivileged_gpus(ctx.spec, ctx.node) else None
    if ctk is not None:
        steps.append(ctk)
    root = toolkit_driver_root(ctx.spec, ctx.node)
    if root is not None and (ctk is not None or not toolkit_root_is(current, root)):
        what = f"{TOOLKIT_CONFIG}: nvidia-container-cli root = {root} (the GPU Operator's driver container)"
        steps.append(Step(StepKind.RECONFIGURE, what, toolkit_root_command(root)))
    return steps


def toolkit_layer(ctx: Ctx) -> Layer:
    """The four toolkit packages pinned together; the CDI spec when it is missing or stale; on
    Kubernetes nodes, the toolkit's config refusing ``NVIDIA_VISIBLE_DEVICES`` from unprivileged
    containers (:func:`gpuforge.render.nvidia.restrict_unprivileged_gpus`)."""
    if not toolkit_wanted(ctx):
        return Layer.empty("nvidia-container-toolkit")
    s, hf = ctx.spec, ctx.host
    ver = s.versions.container_toolkit
    repo = src.container_repo(s, ctx.os)
    cdi = s.container_runtime.cdi
    pinned = [f"{p}={ver}-1" for p in TOOLKIT_PACKAGES] if ctx.deb else [f"{p}-{ver}-1" for p in TOOLKIT_PACKAGES]
    driver = ctx.driver_version if host_driver(s) else (hf.loaded_driver or "operator")
    want_marker = f"{ver} {driver}"
    restrict = restrict_unprivileged_gpus(s, ctx.node)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not repo.available:
            steps.append(unavailable_step(f"NVIDIA container toolkit {ver}", repo.reason))
            return keep_reports(ctx, "nvidia-container-toolkit", steps)
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
        steps += toolkit_config_steps(ctx, facts.contents.get(TOOLKIT_CONFIG))
        return keep_reports(ctx, "nvidia-container-toolkit", steps)

    config = restrict or toolkit_driver_root(s, ctx.node) is not None
    read_paths = ((CDI_SPEC, CDI_MARKER) if cdi else ()) + ((TOOLKIT_CONFIG,) if config else ())
    return Layer(
        "nvidia-container-toolkit",
        packages=tuple(pinned) if ctx.deb and repo.available else (),
        read_paths=read_paths,
        after=after,
    )
