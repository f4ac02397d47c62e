"""A node group's baseboard management controllers (``node_groups[].bmc``).

Each node of the group has one BMC, addressed like the nodes themselves (``addresses`` or
``address_start``). ``protocol: redfish`` (HTTPS, the default) or ``protocol: ipmi`` (IPMI 2.0
over RMCP+, UDP); which fields each protocol needs or refuses is checked by
:mod:`gpuforge.spec.bmc_rules`.

Invariants:

* no credential is ever in the spec: ``credentials_file`` names a file on the control host that
  holds them (checked when ``gpuforge power`` runs: a regular file, not group/world readable);
* Redfish's TLS is always verified, by the certificate's SHA-256 fingerprint (``tls_fingerprint``,
  stored as 64 lower-case hexadecimal digits), since BMCs use self-signed certificates; IPMI has no
  TLS and no server identity, so it takes no fingerprint;
* ``port`` absent means the protocol's own (:data:`DEFAULT_PORT`);
* a BMC field changes nothing on a node: every field's update policy is ``live``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator

from gpuforge.spec.policy import live
from gpuforge.spec.strict import StrictModel
from gpuforge.spec.types import IpAddress, Ipv4Start, LocalPath

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: A Redfish resource id as it lands in a URL path segment (``/redfish/v1/Systems/<id>``).
_SYSTEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,127}")


class BmcProtocol(StrEnum):
    """How gpuforge talks to a BMC."""

    REDFISH = "redfish"
    IPMI = "ipmi"


#: The port a BMC's service listens on when the spec gives none: HTTPS for Redfish, the RMCP port
#: (UDP) for IPMI.
DEFAULT_PORT: dict[BmcProtocol, int] = {BmcProtocol.REDFISH: 443, BmcProtocol.IPMI: 623}


def tls_fingerprint(value: str) -> str:
    """A SHA-256 certificate fingerprint: 64 hexadecimal digits, with or without ':' between pairs
    (as ``openssl x509 -noout -fingerprint -sha256`` prints it); stored lower case without ':'."""
    bare = value.strip().lower().replace(":", "")
    if not _HEX64.fullmatch(bare):
        raise ValueError(
            f"{value!r} is not a SHA-256 certificate fingerprint: 64 hexadecimal digits, optionally in "
            "pairs separated by ':' (openssl x509 -noout -fingerprint -sha256 -in CERT)"
        )
    return bare


def system_id(value: str) -> str:
    """A Redfish ComputerSystem id: one URL path segment (letters, digits, '.', '_', '~', '-')."""
    if not _SYSTEM_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Redfish system id (letters, digits, '.', '_', '~', '-'; 128 at most)")
    return value


TlsFingerprint = Annotated[str, AfterValidator(tls_fingerprint)]
SystemId = Annotated[str, AfterValidator(system_id)]


class Bmc(StrictModel):
    """The BMC of each node of the group (power through Redfish or IPMI: ``gpuforge power``)."""

    protocol: BmcProtocol = live(
        BmcProtocol.REDFISH, "redfish (HTTPS, certificate pinned) or ipmi (IPMI 2.0 RMCP+ over UDP: prefer redfish)"
    )
    addresses: list[IpAddress] | None = live(None, "BMC address of each host, in the order of hosts")
    address_start: Ipv4Start | None = live(
        None, "First BMC IPv4 address, the rest follow in host order (with a prefix when larger than a /24)"
    )
    port: int | None = live(
        None, "Port of the BMCs' service (default: 443, Redfish's HTTPS; 623, IPMI's RMCP+ over UDP)", ge=1, le=65535
    )
    credentials_file: LocalPath = live(
        description="Control-host file holding 'username:password' (or the two on two lines); "
        "a regular file readable by its owner only (0600); relative to the spec file's folder"
    )
    tls_fingerprint: TlsFingerprint | None = live(
        None,
        "SHA-256 fingerprint of the BMCs' TLS certificate (pinned: checked before any credential is sent); "
        "one certificate for the whole group; required for redfish, refused for ipmi (no TLS)",
    )
    system_id: SystemId | None = live(
        None, "Redfish ComputerSystem id (default: the only member of /redfish/v1/Systems); redfish only"
    )

    @property
    def service_port(self) -> int:
        """The port gpuforge reaches the BMCs at: ``port``, else the protocol's default."""
        return self.port if self.port is not None else DEFAULT_PORT[self.protocol]
