"""Layer 8, nvidia-dcgm: DCGM and dcgm-exporter."""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Service, Step, StepKind
from gpuforge.deploy.layers.nvidia.common import (
    DCGM_EXPORTER_MARKER,
    STATE_DIR,
    apt_install,
    dnf_install,
    keep_reports,
    quote_path,
    unavailable_step,
    upload_file,
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
    DCGM_EXPORTER_BIN,
    DCGM_EXPORTER_UNIT,
    host_dcgm_exporter,
)


def dcgm_layer(ctx: Ctx) -> Layer:
    """DCGM 4 at the pin (nvidia-dcgm) and dcgm-exporter with the rendered unit and counters."""
    if not dcgm_wanted(ctx):
        return Layer.empty("nvidia-dcgm")
    s, hf = ctx.spec, ctx.host
    ver = s.versions.dcgm
    repo = src.cuda_repo(s, ctx.platform)
    exporter = host_dcgm_exporter(s)
    binary = src.dcgm_exporter_artifact(s, ctx.platform) if exporter else None
    files = ctx.file(DCGM_COUNTERS_CSV) + ctx.file(DCGM_EXPORTER_UNIT)
    if binary is not None and binary.local:
        files.append(upload_file(DCGM_EXPORTER_BIN, src.bundle_files_single(binary.local), mode="0755"))
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
    names = dcgm_packages(ctx)
    pinned = [f"{p}-{ver}" for p in names]

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not repo.available:
            steps.append(unavailable_step(f"DCGM {ver}", repo.reason))
        else:
            have = {p: (facts.packages.get(p) if ctx.deb else hf.packages.get(p)) for p in names}
            if not ctx.deb and any(v is None for v in have.values()):
                steps.append(Step(StepKind.INSTALL, f"install DCGM {ver}", dnf_install(pinned)))
            wrong = sorted({v for v in have.values() if v is not None and not src.version_matches(v, ver)})
            if wrong:
                cmd = apt_install(list(names), downgrades=True) if ctx.deb else dnf_install(pinned)
                steps.append(Step(StepKind.UPGRADE, f"DCGM {', '.join(wrong)} -> {ver}", cmd))
        if binary is not None and not binary.available:
            steps.append(unavailable_step(f"dcgm-exporter {s.versions.dcgm_exporter}", binary.reason))
        elif binary is not None and binary.url is not None:
            have_ver = (facts.contents.get(DCGM_EXPORTER_MARKER) or "").strip()
            if have_ver != s.versions.dcgm_exporter:
                cmd = (
                    f"{src.fetch_command(binary)} && "
                    f"install -m 0755 {quote_path(binary.node_path)} {DCGM_EXPORTER_BIN} && "
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
        return keep_reports(ctx, "nvidia-dcgm", steps)

    return Layer(
        "nvidia-dcgm",
        packages=names if ctx.deb and repo.available else (),
        directories=(Directory("/etc/dcgm-exporter"),) if exporter else (),
        files=files,
        services=tuple(services),
        read_paths=(DCGM_EXPORTER_MARKER,) if binary is not None and binary.url is not None else (),
        before_services=before,
    )
