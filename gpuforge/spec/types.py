"""Value types for spec fields, each validated for the place it lands.

A spec value ends up in a shell command, an apt or dnf source line, slurm.conf, sacctmgr's
stdin, /etc/hosts, chrony.conf or a file path. Each type below accepts only what is one
literal token in its place: no value can add a line, a command or a path outside its place.
Every check is a full match (``re.fullmatch``): a trailing newline never slips through ``$``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*")
_POSIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: Characters of a URL path (RFC 3986 unreserved, sub-delims that no config format here treats
#: specially, '%' escapes, '/' and '~'), plus ``{distro}``'s braces handled separately.
_URL_PATH = re.compile(r"[A-Za-z0-9._~%/+,=:@-]*")
_URL_PLACEHOLDERS = ("{distro}",)
#: Free text that goes to sacctmgr (one command per line, values in quotes): printable, no quotes.
_TEXT = re.compile(r"[^\x00-\x1f\x7f'\"\\`]{1,200}")
MAX_PATH = 4096


def dns_name(value: str) -> str:
    """An RFC 1123 host or domain name (labels of letters, digits, inner hyphens; 253 chars at most)."""
    if len(value) > 253 or not _DNS_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS name (RFC 1123 labels: letters, digits, inner '-', joined by '.')")
    return value


def host_or_ip(value: str) -> str:
    """An IP address or an RFC 1123 name."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    try:
        return dns_name(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither an IP address nor a DNS name") from None


def http_url(value: str) -> str:
    """An http(s) URL: scheme, host (name or IP), optional port, path of URL characters only.

    The path may hold the ``{distro}`` placeholder. No user info, query, fragment, whitespace,
    quote, semicolon or control character: the URL lands in apt, dnf and deb822 source lines.
    """
    if len(value) > 2048 or CONTROL.search(value):
        raise ValueError(f"{value!r} is not a URL: it has control characters or is too long")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{value!r} must be an http:// or https:// URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(f"{value!r}: user names and passwords do not belong in the URL")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError(f"{value!r}: a repository URL has no query or fragment")
    host = parts.hostname or ""
    if host.startswith("[") or ":" in host:
        ipaddress.IPv6Address(host.strip("[]"))
    else:
        host_or_ip(host)
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{value!r}: port {port} is out of range")
    path = parts.path
    for placeholder in _URL_PLACEHOLDERS:
        path = path.replace(placeholder, "")
    if not _URL_PATH.fullmatch(path) or "/../" in f"{parts.path}/" or parts.path.endswith("/.."):
        raise ValueError(f"{value!r}: the path may hold letters, digits and . _ ~ % / + , = : @ - only")
    return value


_REGISTRY = re.compile(rf"{LABEL}(?:\.{LABEL})*(?::[0-9]{{1,5}})?(?:/[a-z0-9][a-z0-9._/-]*)?")


def registry_ref(value: str) -> str:
    """A container registry host with optional port and path prefix (``registry.example.org:5000/nvidia``)."""
    if len(value) > 512 or not _REGISTRY.fullmatch(value) or "/../" in f"{value}/":
        raise ValueError(f"{value!r} is not a registry reference (host[:port][/path])")
    return value


#: slurm.conf lines that declare objects, and keys gpuforge renders itself: never from extra_config.
SLURM_OBJECT_KEYS = frozenset({"NodeName", "PartitionName", "NodeSet", "DownNodes", "FrontendName", "SwitchName"})
#: Keys templates/slurm/slurm.conf.j2 renders from spec fields (a test keeps this in step).
RENDERED_SLURM_KEYS = frozenset(
    {
        "AccountingStorageEnforce",
        "AccountingStorageHost",
        "AccountingStoragePort",
        "AccountingStorageTRES",
        "AccountingStorageType",
        "AuthType",
        "ClusterName",
        "CryptoType",
        "GresTypes",
        "HealthCheckInterval",
        "HealthCheckNodeState",
        "HealthCheckProgram",
        "JobAcctGatherType",
        "JobCompType",
        "JobRequeue",
        "PreemptMode",
        "PreemptType",
        "PriorityDecayHalfLife",
        "PriorityType",
        "PriorityWeightAge",
        "PriorityWeightFairshare",
        "PriorityWeightJobSize",
        "PriorityWeightPartition",
        "PriorityWeightQOS",
        "ProctrackType",
        "ReturnToService",
        "SchedulerType",
        "SelectType",
        "SelectTypeParameters",
        "SlurmUser",
        "SlurmctldHost",
        "SlurmctldLogFile",
        "SlurmctldParameters",
        "SlurmctldPidFile",
        "SlurmctldPort",
        "SlurmdLogFile",
        "SlurmdPidFile",
        "SlurmdPort",
        "SlurmdSpoolDir",
        "StateSaveLocation",
        "TaskPlugin",
        "TopologyPlugin",
    }
)
_SLURM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
_SLURM_VALUE = re.compile(r"[^\x00-\x1f\x7f#]{1,1024}")


def slurm_parameter(key: str, value: str) -> None:
    """An extra slurm.conf ``Key=Value``: a parameter name and a one-line value without comments."""
    if not _SLURM_KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not a slurm.conf parameter name (letters and digits)")
    if key in SLURM_OBJECT_KEYS or key.lower() == "include":
        raise ValueError(f"{key} declares nodes, partitions or files: use the spec's own fields")
    if key in RENDERED_SLURM_KEYS:
        raise ValueError(f"{key} is rendered from the spec: set the spec field instead (docs/spec-reference.md)")
    if not _SLURM_VALUE.fullmatch(value):
        raise ValueError(f"{key}={value!r}: the value must be one line of 1-1024 characters without '#'")


def k8s_name(name: str) -> str:
    """A spec name as a Kubernetes object name (DNS-1123: no underscores)."""
    out = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
    if not out:
        raise ValueError(f"{name!r} cannot be turned into a Kubernetes name")
    return out


def mig_resource(profile: str) -> str:
    """The Kubernetes resource the device plugin offers a MIG profile as under the ``mixed`` strategy
    (NVIDIA/k8s-device-plugin v0.20.0 ``internal/rm/rm.go``: ``nvidia.com/mig-<profile>``, "+" written
    "."): ``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def posix_user(value: str) -> str:
    if not _POSIX_USER.fullmatch(value):
        raise ValueError(f"{value!r} is not a user name (lowercase letters, digits, _ and -; 32 chars at most)")
    return value


def plain_text(value: str) -> str:
    """Printable text of 1-200 characters without quotes or backslashes (sacctmgr takes it quoted)."""
    if not _TEXT.fullmatch(value):
        raise ValueError(
            f"{value!r}: 1-200 printable characters, without quotes, backslashes, backticks or line breaks"
        )
    return value


def local_path(value: str) -> str:
    """A path on the control host: no control characters, not an option (no leading '-')."""
    if not value or len(value) > MAX_PATH or CONTROL.search(value) or value.startswith("-"):
        raise ValueError(f"{value!r} is not a usable path (empty, too long, a leading '-' or a control character)")
    return value


DnsName = Annotated[str, AfterValidator(dns_name)]
HostOrIp = Annotated[str, AfterValidator(host_or_ip)]
HttpUrl = Annotated[str, AfterValidator(http_url)]
PosixUser = Annotated[str, AfterValidator(posix_user)]
PlainText = Annotated[str, AfterValidator(plain_text)]
LocalPath = Annotated[str, AfterValidator(local_path)]
RegistryRef = Annotated[str, AfterValidator(registry_ref)]
