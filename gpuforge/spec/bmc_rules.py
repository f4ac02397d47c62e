"""What a node group's ``bmc`` section must say before ``gpuforge power`` can reach its BMCs.

* ``protocol: redfish`` needs ``tls_fingerprint``; ``protocol: ipmi`` refuses it (IPMI has no TLS)
  and refuses ``system_id`` (a Redfish resource id: an IPMI BMC has one chassis);
* one BMC address per host: ``addresses`` (as many as hosts) or ``address_start`` (the range fits
  its network), not both, not neither;
* a BMC address is no node's address, and no two nodes name the same system behind the same BMC
  (address, port and ``system_id``; one BMC serving several systems is named once per system).

Invariant: :func:`bmc_rules` yields nothing for a spec without a ``bmc`` section.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec.bmc import Bmc, BmcProtocol
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import NodeGroup, Spec
from gpuforge.spec.nodes import address_range_problem, expand_addresses, group_addresses

#: What else can tell two nodes behind one BMC apart: a Redfish system id; nothing for IPMI (one chassis).
_OR_SYSTEM_ID = {BmcProtocol.REDFISH: ", or each its system_id", BmcProtocol.IPMI: ""}


def bmc_addresses(group: NodeGroup) -> list[str | None]:
    """The BMC address of each host of the group, in host order (None: not given)."""
    bmc = group.bmc
    if bmc is None:
        return [None] * len(group.hostnames)
    return expand_addresses(len(group.hostnames), bmc.addresses, bmc.address_start)


def _protocol_issues(at: tuple[str | int, ...], bmc: Bmc) -> Iterator[SpecIssue]:
    if bmc.protocol is BmcProtocol.REDFISH:
        if bmc.tls_fingerprint is None:
            yield SpecIssue(
                (*at, "tls_fingerprint"),
                "required for protocol redfish: the SHA-256 fingerprint of the BMCs' certificate "
                "(openssl x509 -noout -fingerprint -sha256 -in CERT)",
            )
        return
    if bmc.tls_fingerprint is not None:
        yield SpecIssue(
            (*at, "tls_fingerprint"),
            "protocol ipmi has no TLS, so no certificate to pin: remove tls_fingerprint "
            "(or use protocol redfish, which pins it)",
        )
    if bmc.system_id is not None:
        yield SpecIssue(
            (*at, "system_id"),
            "a Redfish ComputerSystem id means nothing to protocol ipmi (one chassis per BMC): remove system_id",
        )


def _section_issues(gi: int, group: NodeGroup, bmc: Bmc) -> Iterator[SpecIssue]:
    at = ("node_groups", gi, "bmc")
    yield from _protocol_issues(at, bmc)
    count = len(group.hostnames)
    if bmc.addresses is not None and bmc.address_start is not None:
        yield SpecIssue((*at, "address_start"), "give either addresses or address_start, not both")
    elif bmc.addresses is None and bmc.address_start is None:
        yield SpecIssue((*at, "addresses"), "no BMC address: give addresses (one per host) or address_start")
    elif bmc.addresses is not None and len(bmc.addresses) != count:
        yield SpecIssue(
            (*at, "addresses"),
            f"{len(bmc.addresses)} BMC address(es) for {count} host(s) in {group.hosts!r}; give one per host",
        )
    problem = address_range_problem(bmc.address_start, count)
    if problem:
        yield SpecIssue((*at, "address_start"), problem)


def bmc_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Every problem of the ``bmc`` sections of ``spec``."""
    node_owner = {a: n for g in spec.node_groups for n, a in zip(g.hostnames, group_addresses(g), strict=False) if a}
    bmc_owner: dict[tuple[str, int, str | None], str] = {}
    for gi, group in enumerate(spec.node_groups):
        if group.bmc is None:
            continue
        yield from _section_issues(gi, group, group.bmc)
        field = "addresses" if group.bmc.addresses is not None else "address_start"
        for name, addr in zip(group.hostnames, bmc_addresses(group), strict=True):
            if addr is None:
                continue
            port, system = group.bmc.service_port, group.bmc.system_id
            owner = bmc_owner.setdefault((addr, port, system), name)
            if owner != name:
                yield SpecIssue(
                    ("node_groups", gi, "bmc", field),
                    f"BMC {addr}:{port} (system {system or 'default'}) is also {owner}'s: "
                    f"give each node its own BMC{_OR_SYSTEM_ID[group.bmc.protocol]}",
                    node=name,
                )
            if addr in node_owner:
                yield SpecIssue(
                    ("node_groups", gi, "bmc", field),
                    f"BMC address {addr} is the address of node {node_owner[addr]}: a BMC has its own address",
                    node=name,
                )
