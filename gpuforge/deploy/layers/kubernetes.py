"""kubernetes: what every Kubernetes node needs before kubeadm, and the manifests on the control plane.

- Kernel (``kubernetes.kernel_setup``): ``overlay`` and ``br_netfilter`` loaded now and at boot
  (modules-load.d), the bridge and forwarding sysctls set now and at boot (sysctl.d). Decided
  from the kernel's own state (``/proc/filesystems``, ``/proc/sys``), not from whether the files
  changed, so a run interrupted between writing a file and applying it is finished by the next.
- Swap off (kubelet will not start with swap on) and kept off: the fstab entries that would turn it
  back on at boot are commented out (:mod:`gpuforge.probes.swap` parses both files).
- The GPU Operator values and the batch-queue manifests on the first control-plane node.

The container runtime (containerd with the systemd cgroup driver) is the container-engine layer
of the ``nvidia`` deploy, which every Kubernetes node runs, control plane included.
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Directory, Layer, LayerFacts, Step, StepKind
from gpuforge.deploy.operations.layer import converge
from gpuforge.probes.swap import active_swaps, fstab_swap_lines
from gpuforge.render.files import Secrets
from gpuforge.render.kubernetes import K8S_MODULES, K8S_SYSCTL, K8S_SYSCTLS, MANIFEST_DIR, kubernetes_files
from gpuforge.spec import Spec
from gpuforge.spec.model import K8S_ROLES
from gpuforge.spec.nodes import Node

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


def kubernetes_layer(s: Spec, n: Node) -> Layer:
    """The node's Kubernetes prerequisites and (first control plane) manifests; empty elsewhere."""
    if s.kubernetes is None or not n.roles & K8S_ROLES:
        return Layer.empty("kubernetes")
    files = kubernetes_files(s, n, Secrets.redacted())
    kernel = s.kubernetes.kernel_setup
    read = [PROC_SWAPS, FSTAB]
    if kernel:
        read += [PROC_FILESYSTEMS, BRIDGE_NF, *(sysctl_path(k) for k, _ in K8S_SYSCTLS)]
    manifests = any(f.path.startswith(MANIFEST_DIR + "/") for f in files)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        return [*(kernel_steps(facts) if kernel else []), *swap_steps(facts)]

    return Layer(
        "kubernetes",
        directories=(Directory(MANIFEST_DIR, "0755"),) if manifests else (),
        files=files,
        read_paths=tuple(dict.fromkeys(read)),
        after=after,
    )


@deploy("gpuforge kubernetes")
def kubernetes() -> None:
    s, n = spec(), node()
    converge(name="kubernetes: node prerequisites and manifests", layer=kubernetes_layer(s, n))
