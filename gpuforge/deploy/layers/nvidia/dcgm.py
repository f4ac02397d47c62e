"""Layer 8, nvidia-dcgm: DCGM and dcgm-exporter, both packages of NVIDIA's CUDA repository."""

from __future__ import annotations

from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Service, Step, StepKind
from gpuforge.deploy.layers.nvidia.common import (
    apt_install,
    dnf_install,
    keep_reports,
    unavailable_step,
)
from gpuforge.deploy.layers.nvidia.driver import gpu_service_state
from gpuforge.deploy.nvidia_needs import (
    Ctx,
    dcgm_packages,
    dcgm_wanted,
)
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import (
    DCGM_COUNTERS_CSV,
    DCGM_EXPORTER_UNIT,
    host_dcgm_exporter,
)
from gpuforge.spec import nvidia_packages as table


def dcgm_layer(ctx: Ctx) -> Layer:
    """DCGM 4 at the pin (nvidia-dcgm) and dcgm-exporter's package with the rendered unit and counters.

    The exporter package (``datacenter-gpu-manager-exporter``, nvidia_packages ``dcgm-exporter-install``)
    ships ``nvidia-dcgm-exporter.service`` reading its default counters; gpuforge keeps that unit
    stopped and runs its own ``dcgm-exporter.service`` (the spec's counters and port) on the same binary.
    """
    if not dcgm_wanted(ctx):
        return Layer.empty("nvidia-dcgm")
    s, hf = ctx.spec, ctx.host
    ver = s.versions.dcgm
    repo = src.cuda_repo(s, ctx.platform)
    exporter = host_dcgm_exporter(s)
    exp_ver = table.dcgm_exporter_package_version(s.versions.dcgm_exporter)
    files = ctx.file(DCGM_COUNTERS_CSV) + ctx.file(DCGM_EXPORTER_UNIT)
    ready = gpu_service_state(ctx)
    services: list[Service] = []
    if ready is not None and repo.available:
        services.append(Service("nvidia-dcgm", running=ready))
        if exporter:
            services.append(Service(table.DCGM_EXPORTER_PACKAGED_UNIT, enabled=False, running=False))
            services.append(Service("dcgm-exporter", running=ready, restart_on=(DCGM_EXPORTER_UNIT, DCGM_COUNTERS_CSV)))
    names = dcgm_packages(ctx)
    wanted = {p: ver for p in names} | ({table.DCGM_EXPORTER_PACKAGE: exp_ver} if exporter else {})
    pinned = [f"{p}-{v}" for p, v in wanted.items()]

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not repo.available:
            steps.append(unavailable_step(f"DCGM {ver}", repo.reason))
        else:
            have = {p: (facts.packages.get(p) if ctx.deb else hf.packages.get(p)) for p in wanted}
            if not ctx.deb and any(v is None for v in have.values()):
                steps.append(Step(StepKind.INSTALL, f"install DCGM {ver}", dnf_install(pinned)))
            wrong = sorted({v for p, v in have.items() if v is not None and not src.version_matches(v, wanted[p])})
            if wrong:
                cmd = apt_install(list(wanted), downgrades=True) if ctx.deb else dnf_install(pinned)
                steps.append(Step(StepKind.UPGRADE, f"DCGM {', '.join(wrong)} -> {ver}", cmd))
        if not hf.gpu_present:
            steps.append(
                Step(StepKind.NOTE, "no NVIDIA GPU on the PCI bus: nvidia-dcgm and dcgm-exporter are not started")
            )
        return keep_reports(ctx, "nvidia-dcgm", steps)

    return Layer(
        "nvidia-dcgm",
        packages=tuple(wanted) if ctx.deb and repo.available else (),
        directories=(Directory("/etc/dcgm-exporter"),) if exporter else (),
        files=files,
        services=tuple(services),
        before_services=before,
    )
