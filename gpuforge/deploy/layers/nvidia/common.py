"""Paths, markers and step helpers shared by the NVIDIA layers; the run records they keep."""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import REPORTS, Step, StepKind
from gpuforge.deploy.nvidia_needs import (
    Ctx,
)
from gpuforge.deploy.package_manager import DEB, RPM
from gpuforge.deploy.runstate import RunState
from gpuforge.render.files import LocalSource, RenderedFile

STATE_DIR = "/var/lib/gpuforge"
CDI_MARKER = f"{STATE_DIR}/cdi.generated"
PYXIS_MARKER = f"{STATE_DIR}/pyxis.built"
DCGM_EXPORTER_MARKER = f"{STATE_DIR}/dcgm-exporter.version"
# The orchestrator (gpuforge.orchestrate.apply.reboot_if_needed) reboots drained nodes that carry it.
REBOOT_MARKER = f"{STATE_DIR}/reboot-required"
INITRAMFS_CONF = "/etc/initramfs-tools/initramfs.conf"
DRACUT_CONF = "/etc/dracut.conf"


def pyxis_rebuilt(run: RunState, host_name: str) -> bool:
    """pyxis was (re)built on ``host_name`` in this run: slurmd must restart to load it."""
    return any(p.endswith("/spank_pyxis.so") for p in run.changed_paths(host_name, "pyxis"))


def keep_reports(ctx: Ctx, key: str, steps: list[Step]) -> list[Step]:
    """Keep this layer's steps a person must read (``converge.REPORTS``) in the run's reports."""
    ctx.run.record_report(ctx.name, key, [s for s in steps if s.kind in REPORTS])
    return steps


def quote_path(path: str) -> str:
    return shlex.quote(path)


def verify_version_command(package: str, version: str, deb: bool) -> str:
    query = f"dpkg-query -W -f='${{Version}}' {package}" if deb else f"rpm -q --qf '%{{VERSION}}' {package}"
    return (
        f'v=$({query} 2>/dev/null); case "${{v#*:}}" in {version}|{version}-*) ;; '
        f"*) echo \"{package} is '$v' after the install, the spec pins {version}: "
        f'is {version} in the configured repositories?" >&2; exit 1;; esac'
    )


def apt_install(packages: list[str], downgrades: bool = False, update_first: bool = False) -> str:
    """The deb row of ``package_manager`` (apt)."""
    return DEB.install(packages, downgrades=downgrades, update_first=update_first)


def dnf_install(packages: list[str]) -> str:
    """The rpm row of ``package_manager`` (dnf); ``name=version`` pins become ``name-version``."""
    return RPM.install(packages)


def unavailable_step(what: str, reason: str | None) -> Step:
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


def upload_file(path: str, data: bytes | LocalSource, mode: str = "0644") -> RenderedFile:
    return RenderedFile(path, data, mode=mode)
