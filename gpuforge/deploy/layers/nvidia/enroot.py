"""Layers 5 and 6: enroot from release files, and pyxis built against the installed Slurm."""

from __future__ import annotations

import shlex

from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Step, StepKind
from gpuforge.deploy.layers.nvidia.common import (
    PYXIS_MARKER,
    STATE_DIR,
    apt_install,
    dnf_install,
    keep_reports,
    quote_path,
    unavailable_step,
    upload_file,
)
from gpuforge.deploy.nvidia_needs import (
    Ctx,
)
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import (
    ENROOT_CONF,
    ENROOT_TMPFILES,
    USERNS_SYSCTL,
)
from gpuforge.render.nvidia_repos import enroot_wanted, pyxis_wanted
from gpuforge.render.slurm import plugin_dir, slurm_dev_package
from gpuforge.spec.model import Role

#: enroot's extra hooks (Slurm's PMI/PMIx and PyTorch variables in containers): its packages put them in
#: /usr/share/enroot/hooks.d, which enroot does not read; pyxis' wiki (Setup) has them copied, NVIDIA/deepops
#: (roles/pyxis/tasks/main.yml) links them into /etc/enroot/hooks.d on compute nodes: gpuforge links them too.
EXTRA_HOOKS = ("50-slurm-pmi.sh", "50-slurm-pytorch.sh")
EXTRA_HOOKS_DIR = "/usr/share/enroot/hooks.d"
HOOKS_DIR = "/etc/enroot/hooks.d"


def hook_links(ctx: Ctx) -> tuple[str, ...]:
    """Paths of the extra hook links a node gets (compute nodes: where jobs run in containers)."""
    return tuple(f"{HOOKS_DIR}/{h}" for h in EXTRA_HOOKS) if ctx.node.has(Role.COMPUTE) else ()


def enroot_layer(ctx: Ctx) -> Layer:
    """enroot + enroot+caps from release files; its configs; user namespaces on."""
    if not enroot_wanted(ctx.spec, ctx.node):
        return Layer.empty("enroot")
    ver = ctx.spec.versions.enroot
    arts = src.enroot_artifacts(ctx.spec, ctx.platform)
    pushed = [upload_file(a.node_path, src.bundle_files_single(a.local)) for a in arts if a.local]
    files = ctx.file(ENROOT_CONF) + ctx.file(ENROOT_TMPFILES) + ctx.file(USERNS_SYSCTL)
    names = ["enroot", "enroot+caps"]
    links = hook_links(ctx)

    def before(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        missing = [a for a in arts if not a.available]
        have = {p: ctx.host.packages.get(p) for p in names}
        if missing:
            steps.append(unavailable_step(f"enroot {ver}", "; ".join(a.reason or a.name for a in missing)))
        elif any(not src.version_matches(v, ver) for v in have.values()) or any(a.node_path in changed for a in arts):
            fetch = " && ".join(src.fetch_command(a) for a in arts)
            paths = [a.node_path for a in arts]
            install = apt_install(paths, downgrades=True) if ctx.deb else dnf_install(paths)
            where = "the bundle" if arts[0].local else (arts[0].url or "").rsplit("/", 1)[0]
            now = ", ".join(f"{p} {v}" for p, v in have.items() if v) or "not installed"
            steps.append(Step(StepKind.INSTALL, f"enroot {ver} from {where} (now: {now})", f"{fetch} && {install}"))
        missing_links = [p for p in links if facts.contents.get(p) is None]
        if missing_links:
            cmd = f"install -d -m 0755 {HOOKS_DIR} && " + " && ".join(
                f"ln -sfn {EXTRA_HOOKS_DIR}/{p.rsplit('/', 1)[1]} {p}" for p in missing_links
            )
            hooks = ", ".join(p.rsplit("/", 1)[1] for p in missing_links)
            steps.append(Step(StepKind.LINK, f"enable enroot's extra hooks {hooks} (Slurm PMI/PMIx, PyTorch)", cmd))
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
        return keep_reports(ctx, "enroot", steps)

    return Layer(
        "enroot",
        early_files=pushed,
        directories=(Directory("/etc/enroot"),),
        files=files,
        read_paths=links,
        before_services=before,
    )


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
    plugin = f"{plugin_dir(ctx.platform, ctx.spec)}/spank_pyxis.so"
    dev = slurm_dev_package(ctx.spec, ctx.deb)
    packages = ("gcc", "make", dev, "curl", "ca-certificates") if ctx.deb else ()
    pushed = [upload_file(a.node_path, src.bundle_files_single(a.local))] if a.local else []
    query = f"dpkg-query -W -f='${{Version}}' {dev}" if ctx.deb else f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {dev}"

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if not a.available:
            steps.append(unavailable_step(f"pyxis {ver}", a.reason))
            return keep_reports(ctx, "pyxis", steps)
        if not ctx.deb:
            need = [p for p in ("gcc", "make", dev) if ctx.host.packages.get(p) is None]
            if need:
                steps.append(Step(StepKind.INSTALL, f"install {', '.join(need)} (pyxis build)", dnf_install(need)))
        slurm = facts.packages.get(dev) if ctx.deb else ctx.host.packages.get(dev)
        built = (facts.contents.get(PYXIS_MARKER) or "").strip()
        if slurm is not None and built == f"{ver} {slurm}":
            return keep_reports(ctx, "pyxis", steps)
        was = f" (built: {built})" if built else ""
        against = f"Slurm {slurm}" if slurm else f"the Slurm headers ({dev}) installed now"
        # ``|| exit 1``: under ``set -e`` a failing command inside an ``&&`` list does not stop the
        # shell, and the tarball must never be built from unless its sha256 was checked.
        cmd = (
            "set -e; d=$(mktemp -d); trap 'rm -rf \"$d\"' EXIT; "
            f'{src.fetch_command(a)} || exit 1; tar -xzf {quote_path(a.node_path)} -C "$d" --strip-components=1; '
            f'make -s -C "$d" VERSION={shlex.quote(ver)}; '
            f'install -D -m 0644 "$d/spank_pyxis.so" {quote_path(plugin)}; '
            f"sv=$({query}); install -d -m 0755 {STATE_DIR}; "
            f"printf '%s %s\\n' {shlex.quote(ver)} \"$sv\" > {PYXIS_MARKER}"
        )
        steps.append(
            Step(StepKind.BUILD, f"build pyxis {ver} against {against} into {plugin}{was}; slurmd restarts", cmd)
        )
        changed.add(plugin)
        return keep_reports(ctx, "pyxis", steps)

    return Layer("pyxis", packages=packages, early_files=pushed, read_paths=(PYXIS_MARKER,), after=after)
