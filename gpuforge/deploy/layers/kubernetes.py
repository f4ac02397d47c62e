"""kubernetes: what every Kubernetes node needs before kubeadm, and the manifests on the control plane.

- Kernel (``kubernetes.kernel_setup``): ``overlay`` and ``br_netfilter`` loaded now and at boot
  (modules-load.d), the bridge and forwarding sysctls set now and at boot (sysctl.d). Decided
  from the kernel's own state (``/proc/filesystems``, ``/proc/sys``), not from whether the files
  changed, so a run interrupted between writing a file and applying it is finished by the next.
- Swap off (kubelet will not start with swap on) and kept off: the fstab entries that would turn it
  back on at boot are commented out (:mod:`gpuforge.probes.swap` parses both files).
- The Kubernetes packages (kubelet, kubeadm, kubectl) from pkgs.k8s.io's repository of the spec's
  minor, its mirror or the offline bundle, at the spec's patch version and held there (an apt
  pin and ``apt-mark hold``; dnf: the repository's ``exclude=``), as ``install-kubeadm`` says
  (:mod:`gpuforge.spec.k8s_upstream`).
- The GPU Operator values and the batch-queue manifests on the first control-plane node.

The layer also records whether the node is already in the cluster (kubeadm's kubelet config
present and no kubeadm run pending); :mod:`gpuforge.deploy.layers.kubeadm` joins the others.

The container runtime (containerd with the systemd cgroup driver) is the container-engine layer
of the ``nvidia`` deploy, which every Kubernetes node runs, control plane included.
"""

from __future__ import annotations

import os

from pyinfra.api import deploy

from gpuforge.deploy.context import k8s_pki, node, run_state, spec
from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Service, Step, StepKind, refresh_step
from gpuforge.deploy.layers.k8s_addons import addons_layer
from gpuforge.deploy.layers.kubeadm import KUBEADM_PENDING, is_member, operations
from gpuforge.deploy.layers.nvidia.common import quote_path, unavailable_step, upload_file
from gpuforge.deploy.operations.layer import converge
from gpuforge.deploy.package_manager import DEB, RPM
from gpuforge.deploy.runstate import RunState
from gpuforge.probes.swap import active_swaps, fstab_swap_lines
from gpuforge.render import k8s_maintenance
from gpuforge.render import k8s_packages as pkgs
from gpuforge.render import kubeadm as cfg
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.key_check import key_check_command
from gpuforge.render.kubernetes import K8S_MODULES, K8S_SYSCTL, K8S_SYSCTLS, MANIFEST_DIR, kubernetes_files
from gpuforge.spec import Spec, k8s_upstream
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec.model import K8S_ROLES, Role
from gpuforge.spec.nodes import Node
from gpuforge.spec.repo_keys import repository_fingerprint

PROC_SWAPS = "/proc/swaps"
FSTAB = "/etc/fstab"
PROC_FILESYSTEMS = "/proc/filesystems"

#: br_netfilter's sysctls exist only while the module is loaded.
BRIDGE_NF = "/proc/sys/net/bridge/bridge-nf-call-iptables"
#: Comment out every uncommented fstab line of type swap (the same lines ``fstab_swap_lines`` finds).
FSTAB_SWAP_OFF = (
    "sed -i -E '/^[[:space:]]*#/! s/^([[:space:]]*[^[:space:]]+[[:space:]]+[^[:space:]]+[[:space:]]+swap"
    "([[:space:]].*)?)$/# gpuforge: swap off for kubelet: \\1/' /etc/fstab"
)


def sysctl_path(key: str) -> str:
    """``net.ipv4.ip_forward`` -> ``/proc/sys/net/ipv4/ip_forward``."""
    return "/proc/sys/" + key.replace(".", "/")


def kernel_steps(facts: LayerFacts) -> list[Step]:
    """Load the modules that are missing and set the sysctls that differ (from the kernel's state)."""
    steps: list[Step] = []
    filesystems = facts.contents.get(PROC_FILESYSTEMS) or ""
    overlay = any(line.split()[-1:] == ["overlay"] for line in filesystems.splitlines())
    bridge_nf = facts.contents.get(BRIDGE_NF) is not None
    if not (overlay and bridge_nf):
        missing = [m for m, loaded in zip(K8S_MODULES, (overlay, bridge_nf), strict=True) if not loaded]
        steps.append(
            Step(
                StepKind.MODULES,
                f"load {', '.join(missing)} (kept at boot by modules-load.d)",
                f"modprobe -a {' '.join(K8S_MODULES)}",
            )
        )
    wrong = [k for k, v in K8S_SYSCTLS if (facts.contents.get(sysctl_path(k)) or "").strip() != v]
    if wrong or steps:
        steps.append(
            Step(
                StepKind.SYSCTL, f"set {', '.join(wrong or [k for k, _ in K8S_SYSCTLS])}", f"sysctl -q -p {K8S_SYSCTL}"
            )
        )
    return steps


def swap_steps(facts: LayerFacts) -> list[Step]:
    """Swap off now, and fstab's swap entries commented out so that it stays off."""
    steps: list[Step] = []
    on = active_swaps(facts.contents.get(PROC_SWAPS) or "")
    if on:
        steps.append(
            Step(StepKind.SWAP, f"turn swap off ({', '.join(on)}): kubelet will not run with swap on", "swapoff -a")
        )
    if fstab_swap_lines(facts.contents.get(FSTAB) or ""):
        steps.append(
            Step(StepKind.SWAP, "comment out the swap entries of /etc/fstab (swap stays off at boot)", FSTAB_SWAP_OFF)
        )
    return steps


def key_steps(s: Spec, n: Node, repo: src.Repo, facts: LayerFacts, changed: set[str]) -> list[Step]:
    """pkgs.k8s.io's signing key (armored, as served) where apt or dnf reads it (``key_path``) and
    it is missing, moved into place only once it is the pinned key (``spec.repo_keys``: pkgs.k8s.io's,
    or the key the spec pins for a re-signing mirror); the step fails, installing nothing, otherwise."""
    path = pkgs.key_path(n.os)
    if repo.bundle is not None or facts.contents.get(path) is not None:
        return []
    fingerprint = repository_fingerprint(s, pkgs.K8S_REPO, deb=n.os.is_deb)
    if fingerprint is None:
        return [unavailable_step("the Kubernetes repository key", "no fingerprint is pinned for it")]
    part = f"{path}.part"
    cmd = (
        f"install -d -m 0755 {os.path.dirname(path)} && curl -fsSL --retry 3 --connect-timeout 20 -o {part} "
        f"{quote_path(repo.key_url or '')} && chmod 0644 {part} && {key_check_command(part, fingerprint)} && "
        f"mv {part} {path}"
    )
    changed.add(path)
    return [Step(StepKind.KEYRING, f"Kubernetes repository key {fingerprint} from {repo.key_url}", cmd)]


def _install(s: Spec, n: Node, names: tuple[str, ...], sources_changed: bool, have: dict[str, str | None]) -> str:
    """``names`` at the spec's version, held there again (apt: unhold, install, hold; dnf: the
    repository's ``exclude=`` keeps them, ``--disableexcludes`` lets this install through)."""
    wanted = pkgs.package_specs(s, n, names)
    if not n.os.is_deb:
        return RPM.install([f"--disableexcludes={pkgs.K8S_REPO_ID}", *wanted])
    installed = " ".join(p for p in names if have.get(p))  # apt-mark knows installed packages only
    unhold = f"apt-mark unhold {installed} >/dev/null && " if installed else ""
    install = DEB.install(wanted, downgrades=True, update_first=sources_changed)
    return f"{unhold}{install} && {DEB.hold_command(names)}"


def upgrade_steps(s: Spec, n: Node, have: dict[str, str | None], sources_changed: bool) -> list[Step]:
    """A node in the cluster moves to the spec's version as kubeadm's upgrade says (k8s_day2
    'kubeadm-upgrade'): kubeadm first, then ``kubeadm upgrade apply`` on the first control plane
    (after ``kubeadm upgrade plan``) or ``kubeadm upgrade node`` elsewhere, then kubelet and kubectl,
    then the kubelet restarted; each package held at the pin again. The orchestration runs it drained,
    control planes one at a time first (:mod:`gpuforge.orchestrate.k8s_upgrade`). kubeadm's upgrade is
    idempotent, so a node whose kubelet is still off the pin runs it again after an interruption."""
    version = s.versions.kubernetes
    newer = [p for p, v in have.items() if v is not None and pkgs.version_newer(v, version)]
    if newer:
        return [Step(StepKind.WARNING, f"{', '.join(newer)} newer than {version} on a node in the cluster: kubeadm "
                     "does not downgrade; left alone (restore the spec's newer version)")]  # fmt: skip
    steps: list[Step] = []
    if not pkgs.version_is(have.get("kubeadm"), version):
        steps.append(Step(StepKind.UPGRADE, f"kubeadm {have.get('kubeadm')} -> {version} (held)",
                          _install(s, n, ("kubeadm",), sources_changed, have)))  # fmt: skip
        sources_changed = False
    kubelet_off = not pkgs.version_is(have.get("kubelet"), version)
    if kubelet_off:
        first = cfg.first_control_plane(s)
        if first is not None and first.name == n.name:
            steps.append(Step(StepKind.VERIFY, f"kubeadm upgrade plan v{version} (the cluster can be upgraded)",
                              day2.upgrade_plan_command(version)))  # fmt: skip
            steps.append(Step(StepKind.UPGRADE, f"kubeadm upgrade apply v{version} (the control plane, first)",
                              day2.upgrade_apply_command(version)))  # fmt: skip
        else:
            what = "this control plane" if n.has(Role.K8S_CONTROL_PLANE) else "the kubelet configuration"
            steps.append(Step(StepKind.UPGRADE, f"kubeadm upgrade node ({what})", day2.UPGRADE_NODE_COMMAND))
    rest = tuple(p for p in ("kubelet", "kubectl") if not pkgs.version_is(have.get(p), version))
    if rest:
        moves = ", ".join(f"{p} {have.get(p)} -> {version}" for p in rest)
        steps.append(Step(StepKind.UPGRADE, f"{moves} (held)", _install(s, n, rest, sources_changed, have)))
    if kubelet_off:
        steps.append(Step(StepKind.RESTART, "restart kubelet on the new version", day2.KUBELET_RESTART))
    return steps


def package_steps(s: Spec, n: Node, facts: LayerFacts, changed: set[str]) -> list[Step]:
    """kubelet, kubeadm and kubectl at ``versions.kubernetes``, held there (and kubelet enabled); on a
    node in the cluster, through kubeadm's upgrade (:func:`upgrade_steps`)."""
    version = s.versions.kubernetes
    have = {p: facts.packages.get(p) for p in k8s_upstream.PACKAGES}
    off = [p for p, v in have.items() if not pkgs.version_is(v, version)]
    if not off:
        return []
    sources = {pkgs.K8S_LIST, pkgs.K8S_PIN, pkgs.K8S_KEYRING, pkgs.K8S_RPM_KEY, pkgs.K8S_REPO_FILE}
    sources_changed = bool(changed & sources)
    if is_member(facts) and all(have.values()):
        return upgrade_steps(s, n, have, sources_changed)
    moves = ", ".join(f"{p} {have[p] or '(none)'} -> {version}" for p in off)
    cmd = f"{_install(s, n, k8s_upstream.PACKAGES, sources_changed, have)} && systemctl enable kubelet"
    return [Step(StepKind.INSTALL, f"Kubernetes packages at {version}: {moves}", cmd)]


def packages_part(s: Spec, n: Node) -> tuple[src.Repo, list[RenderedFile], list[str]]:
    """The repository, the files that configure it (bundle contents first) and the paths to read."""
    repo = pkgs.kubernetes_repo(s, n.os)
    files: list[RenderedFile] = []
    if repo.bundle is not None:
        files += [upload_file(f"{repo.url}/{rel}", data) for rel, data in src.bundle_files(repo.bundle)]
        key = src.bundle_key(s, n.os.is_deb)
        if key is not None:
            path = src.BUNDLE_KEYRING if n.os.is_deb else f"{src.BUNDLE_ON_NODE}/{src.BUNDLE_RPM_KEY_FILE}"
            files.append(upload_file(path, key))
    files += pkgs.k8s_repo_files(s, n)
    read = [pkgs.key_path(n.os)] if repo.available and repo.bundle is None else []
    return repo, files, read


def kubernetes_layer(s: Spec, n: Node, run: RunState | None = None) -> Layer:
    """The node's Kubernetes prerequisites, packages and (first control plane) manifests; empty elsewhere."""
    if s.kubernetes is None or not n.roles & K8S_ROLES:
        return Layer.empty("kubernetes")
    files = kubernetes_files(s, n, Secrets.redacted())
    kernel = s.kubernetes.kernel_setup
    repo, repo_files, key_read = packages_part(s, n)
    read = [PROC_SWAPS, FSTAB, *key_read, k8s_upstream.KUBELET_CONFIG, KUBEADM_PENDING]
    if kernel:
        read += [PROC_FILESYSTEMS, BRIDGE_NF, *(sysctl_path(k) for k, _ in K8S_SYSCTLS)]
    manifests = any(f.path.startswith(MANIFEST_DIR + "/") for f in files)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if run is not None and repo.available:  # a node without the packages cannot join
            run.record_k8s_member(n.name, is_member(facts))
        steps = [*(kernel_steps(facts) if kernel else []), *swap_steps(facts)]
        if not repo.available:
            missing = unavailable_step("kubelet, kubeadm and kubectl", repo.reason)
            if run is not None:
                run.record_report(n.name, "kubernetes", [missing])
            return [*steps, missing]
        steps += key_steps(s, n, repo, facts, changed)
        installs = package_steps(s, n, facts, changed)
        if not installs and changed & {pkgs.K8S_LIST, pkgs.K8S_PIN, pkgs.K8S_REPO_FILE}:
            what = "Kubernetes package source changed"
            installs = [refresh_step(n.os.is_rpm, what)]
        steps += installs
        return steps

    return Layer(
        "kubernetes",
        early_files=repo_files,
        directories=(Directory(MANIFEST_DIR, "0755"),) if manifests else (),
        files=files,
        read_paths=tuple(dict.fromkeys(read)),
        watch_packages=k8s_upstream.PACKAGES if repo.available else (),
        rpm=not n.os.is_deb,
        after=after,
    )


def maintenance_layer(s: Spec, n: Node) -> Layer:
    """The control plane's certificate renewal and etcd snapshot timers (:mod:`gpuforge.render.k8s_maintenance`),
    enabled and started; a changed timer is restarted (a changed service or script is read at its next run)."""
    units = k8s_maintenance.maintenance_units(s, n)
    if not units:
        return Layer.empty("kubernetes-maintenance")
    return Layer(
        "kubernetes-maintenance",
        files=[f for _, *three in units for f in three],
        services=tuple(Service(unit, restart_on=(timer.path,)) for unit, _, _, timer in units),
    )


@deploy("gpuforge kubernetes")
def kubernetes() -> None:
    s, n, run = spec(), node(), run_state()
    converge(name="kubernetes: node prerequisites, packages and manifests", layer=kubernetes_layer(s, n, run))
    # No kubeadm where the packages have no source (the kubernetes layer reports why).
    on = s.kubernetes is not None and bool(n.roles & K8S_ROLES) and pkgs.kubernetes_repo(s, n.os).available
    pki = k8s_pki() if on else {}
    for title, build in operations(s):
        converge(name=title, layer=build(s, n, run, pki) if on else Layer.empty(title))
    converge(name="kubernetes: cluster add-ons", layer=addons_layer(s, n) if on else Layer.empty("kubernetes-addons"))
    converge(
        name="kubernetes: control plane timers",
        layer=maintenance_layer(s, n) if on else Layer.empty("kubernetes-maintenance"),
    )
