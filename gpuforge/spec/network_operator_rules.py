"""Whether the Network Operator is on, which groups it serves, and the cross-field rules of
``kubernetes.network_operator``.

Rules (each a :class:`SpecIssue` naming its field; ``gpuforge check`` exits 2 on any):

- ``enabled: true`` needs a node group with a Kubernetes role and a ``fabric``;
- ``version`` must be a release whose component images gpuforge knows (``RELEASE_COMPONENTS``);
- ``ofed_driver`` needs every such group's fabric on ``stack: doca`` (the driver container replaces
  DOCA-OFED's kernel modules; a distribution's rdma-core is not what it is built to replace);
- a group that lists its ``hcas`` needs ``if_names``: the device plugin selects by network interface,
  vendor, driver or link type, never by RDMA device name.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.fabric import RdmaStack
from gpuforge.spec.model import K8S_ROLES, NodeGroup, Spec
from gpuforge.spec.network_operator import RELEASE_COMPONENTS

AT = ("kubernetes", "network_operator")


def fabric_groups(spec: Spec) -> list[NodeGroup]:
    """The node groups with a Kubernetes role and a fabric, in spec order."""
    return [g for g in spec.node_groups if g.fabric is not None and set(g.roles) & K8S_ROLES]


def network_operator_on(spec: Spec) -> bool:
    """The Network Operator is installed: as ``enabled`` says, by default when a Kubernetes group has a fabric."""
    if spec.kubernetes is None:
        return False
    enabled = spec.kubernetes.network_operator.enabled
    return bool(fabric_groups(spec)) if enabled is None else enabled


def network_operator_rules(spec: Spec) -> Iterator[SpecIssue]:
    if spec.kubernetes is None:
        return
    no = spec.kubernetes.network_operator
    groups = fabric_groups(spec)
    if no.enabled and not groups:
        yield SpecIssue(
            (*AT, "enabled"),
            "no node group with a Kubernetes role declares a fabric: the Network Operator would offer no HCA; "
            "add a fabric to a k8s group, or remove enabled",
        )
    if not network_operator_on(spec):
        return
    if no.version not in RELEASE_COMPONENTS:
        yield SpecIssue(
            (*AT, "version"),
            f"gpuforge knows the component images of Network Operator {', '.join(RELEASE_COMPONENTS)}, not "
            f"{no.version}: pin one of those",
        )
    distro = [g.name for g in groups if g.fabric is not None and g.fabric.stack is not RdmaStack.DOCA]
    if no.ofed_driver and distro:
        yield SpecIssue(
            (*AT, "ofed_driver"),
            f"the DOCA-OFED driver container replaces DOCA-OFED's kernel modules; group(s) {', '.join(distro)} "
            "use stack: distro: set their fabric's stack: doca, or ofed_driver: false",
        )
    listed = [g.name for g in groups if g.fabric is not None and g.fabric.hcas != "all"]
    if listed and not no.if_names:
        yield SpecIssue(
            (*AT, "if_names"),
            f"group(s) {', '.join(listed)} list their hcas, but the RDMA shared device plugin selects HCAs by "
            "network interface, not RDMA device name: list the interfaces of those HCAs here",
        )
