"""Value types for spec fields, each validated for the place it lands.

A spec value ends up in a shell command, an apt or dnf source line, apt.conf, slurm.conf,
sacctmgr's stdin, /etc/hosts, chrony.conf, YAML/JSON/TOML files, an Ansible inventory or a
file path. Each type below accepts only what is one literal token in its place: no value can
add a line, a command or a path outside its place. Every check is a full match
(``re.fullmatch``): a trailing newline never slips through ``$``. The sinks escape for their
own syntax as well (``gpuforge.render.escape``): a type is the first wall, never the only one.

No address, network or URL takes an IPv6 zone ID (``fe80::1%eth0``): Python's ``ipaddress``
accepts any text after the ``%`` (quotes, ``;``, ``{{ }}``, ``${IFS}``), and no field needs one.
URLs are kept as rebuilt from their checked parts, so what lands is what was checked.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import SplitResult, urlsplit, urlunsplit

from pydantic import AfterValidator

from gpuforge.spec import hostlist
from gpuforge.spec.strict import NAME

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*")
_POSIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: Characters of a URL path (RFC 3986 unreserved, sub-delims that no config format here treats
#: specially, '%' escapes, '/' and '~'), plus the braces of ``{distro}`` and ``{arch}``, handled separately.
_URL_PATH = re.compile(r"[A-Za-z0-9._~%/+,=:@-]*")
#: A '%' in a URL path or query starts a percent-escape: two hex digits follow.
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: A webhook's query string: the path's characters and '&' (no quotes, ';', '$' or '#').
_URL_QUERY = re.compile(r"[A-Za-z0-9._~%/+,=:@&-]*")
#: A webhook's user info (``user:password``): RFC 3986 unreserved characters, %-escapes and the
#: sub-delimiters that no sink here reads (no quotes, no '$', no '@').
_URL_USER_INFO = re.compile(r"[A-Za-z0-9._~%!*+,;=:&()-]+")
_URL_PLACEHOLDERS = ("{distro}", "{arch}")
#: Free text that goes to sacctmgr (one command per line, values in quotes): printable, no quotes.
_TEXT = re.compile(r"[^\x00-\x1f\x7f'\"\\`]{1,200}")
_EMAIL_LOCAL = re.compile(r"[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*")
_MIG_PROFILE = re.compile(r"[0-9]{1,2}g\.[0-9]{1,4}gb(?:\+[a-z]{1,8}(?:\.[a-z]{1,8})?|-[a-z]{1,8})?")
MAX_PATH = 4096


def dns_name(value: str) -> str:
    """An RFC 1123 host or domain name (labels of letters, digits, inner hyphens; 253 chars at most)."""
    if len(value) > 253 or not _DNS_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS name (RFC 1123 labels: letters, digits, inner '-', joined by '.')")
    return value


def _no_zone_id(value: str, shown: str | None = None) -> None:
    """Refuse a '%' (an IPv6 zone ID); ``shown`` is what the message quotes (default: ``value``)."""
    if "%" in value:
        raise ValueError(
            f"{shown or repr(value)}: IPv6 zone IDs ('%' and an interface, e.g. fe80::1%eth0) are not allowed; "
            "give a global or unique-local address (no field needs a link-local one)"
        )


def ip_address(value: str) -> str:
    """An IPv4 or IPv6 address without a zone ID: hex digits, '.' and ':' only."""
    _no_zone_id(value)
    ipaddress.ip_address(value)
    return value


def ipv4_address(value: str) -> str:
    """A dotted-quad IPv4 address."""
    ipaddress.IPv4Address(value)
    return value


#: The network a group's ``address_start`` counts in when it names no prefix.
DEFAULT_NODE_PREFIX = 24


def ipv4_start(value: str) -> str:
    """A dotted-quad IPv4 address, optionally with its network's prefix length (``10.0.1.10/22``)."""
    address, _, prefix = value.partition("/")
    form = "(10.0.1.10, or 10.0.1.10/22 when the node network is larger than a /24)"
    try:
        ipaddress.IPv4Address(address)
    except ValueError as e:
        raise ValueError(f"{value!r} is not an IPv4 address ({e}) {form}") from None
    if prefix and not (prefix.isdigit() and 8 <= int(prefix) <= 31):
        raise ValueError(f"{value!r}: the prefix length must be 8 to 31 {form}")
    return value


def ip_network(value: str) -> str:
    """An IPv4 or IPv6 network in CIDR form (no host bits set), without a zone ID."""
    _no_zone_id(value)
    ipaddress.ip_network(value)
    return value


def host_or_ip(value: str) -> str:
    """An IP address (no zone ID) or an RFC 1123 name."""
    _no_zone_id(value)
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    try:
        return dns_name(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither an IP address nor a DNS name") from None


def host_port(value: str) -> str:
    """``host:port``: a DNS name, an IPv4 address or a bracketed IPv6 one, then a port 1-65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port (a port 1-65535 after the last ':')")
    if host.startswith("[") and host.endswith("]"):
        _no_zone_id(host, repr(value))
        ipaddress.IPv6Address(host[1:-1])
    elif ":" in host:
        raise ValueError(f"{value!r}: an IPv6 host goes in brackets, e.g. [2001:db8::1]:25")
    else:
        host_or_ip(host)
    return value


def _split_url(value: str, user_info: bool = False) -> tuple[SplitResult, str]:
    """The parsed http(s) URL, checked, and its ``[user info@]host[:port]`` rebuilt from the checked
    parts; user info only where ``user_info`` allows it."""
    if len(value) > 2048 or CONTROL.search(value):
        raise ValueError(f"{value!r} is not a URL: it has control characters or is too long")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{value!r} must be an http:// or https:// URL")
    info, at, _ = parts.netloc.rpartition("@")
    if at and not (user_info and _URL_USER_INFO.fullmatch(info) and not _BAD_PERCENT.search(info)):
        raise ValueError(f"{value!r}: user names and passwords do not belong in the URL")
    if parts.fragment or "#" in value:
        raise ValueError(f"{value!r}: a URL here has no fragment")
    host = parts.hostname or ""
    _no_zone_id(host, repr(value))
    if ":" in host:
        ipaddress.IPv6Address(host)
        host = f"[{host}]"
    else:
        host_or_ip(host)
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{value!r}: port {port} is out of range")
    path = parts.path
    for placeholder in _URL_PLACEHOLDERS:
        path = path.replace(placeholder, "")
    if not _URL_PATH.fullmatch(path) or "/../" in f"{parts.path}/" or parts.path.endswith("/.."):
        raise ValueError(f"{value!r}: the path may hold letters, digits and . _ ~ % / + , = : @ - only")
    if _BAD_PERCENT.search(path):
        raise ValueError(f"{value!r}: a '%' in a URL starts a percent-escape (two hex digits)")
    netloc = host if port is None else f"{host}:{port}"
    return parts, f"{info}@{netloc}" if at else netloc


def http_url(value: str) -> str:
    """An http(s) URL: scheme, host (name or IP), optional port, path of URL characters only.

    The path may hold the ``{distro}`` and ``{arch}`` placeholders. No user info, query, fragment, zone ID,
    whitespace, quote, semicolon or control character: the URL lands in apt.conf, apt, dnf and
    deb822 source lines and shell commands. The value kept is the URL rebuilt from its checked
    parts (scheme and host in lower case), never the text as given.
    """
    parts, netloc = _split_url(value)
    if parts.query or "?" in value:
        raise ValueError(f"{value!r}: a repository URL has no query or fragment")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def webhook_url(value: str) -> str:
    """An http(s) URL as :func:`http_url` (without placeholders), with user info (``user:password@``,
    a receiver's credential) and a query of URL characters and '&' allowed; rebuilt from its
    checked parts. It lands in alertmanager.yml through the YAML writer."""
    parts, netloc = _split_url(value, user_info=True)
    if "{" in parts.path or not _URL_QUERY.fullmatch(parts.query) or _BAD_PERCENT.search(parts.query):
        raise ValueError(f"{value!r}: the query may hold letters, digits, %-escapes and . _ ~ / + , = : @ & - only")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def email_address(value: str) -> str:
    """``local@domain``: dot-separated letters, digits, _ + - before the '@', a DNS name after it."""
    local, sep, domain = value.rpartition("@")
    if not sep or len(local) > 64 or not _EMAIL_LOCAL.fullmatch(local):
        raise ValueError(f"{value!r} is not an e-mail address (letters, digits, . _ + - before '@', a domain after)")
    dns_name(domain)
    return value


def mig_profile_name(value: str) -> str:
    """A MIG profile name as NVIDIA writes them: ``1g.10gb``, ``1g.10gb+me``, and the RTX PRO 6000's
    ``1g.24gb+me.all``, ``1g.24gb-me``, ``1g.24gb+gfx`` (mig-parted's config-default.yaml)."""
    if not _MIG_PROFILE.fullmatch(value):
        raise ValueError(f"{value!r} is not a MIG profile name (such as 1g.10gb or 1g.10gb+me)")
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
        "CredType",
        "GresTypes",
        "HealthCheckInterval",
        "HealthCheckNodeState",
        "HealthCheckProgram",
        "JobAcctGatherType",
        "JobCompType",
        "JobRequeue",
        "MpiDefault",
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
        "PropagateResourceLimitsExcept",
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
        "SlurmctldTimeout",
        "SlurmdLogFile",
        "SlurmdPidFile",
        "SlurmdPort",
        "SlurmdSpoolDir",
        "SlurmdTimeout",
        "StateSaveLocation",
        "TaskPlugin",
        "TopologyPlugin",
    }
)
_SLURM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
#: A slurm.conf value: one line without '#' (a comment), '"' (Slurm's quotes), '\\' (Slurm's escape,
#: and at a line's end its continuation); the writer quotes a value that holds spaces.
_SLURM_VALUE = re.compile(r'[^\x00-\x1f\x7f#"\\]{1,1024}')
_SLURM_OBJECT_KEYS_LOWER = frozenset(k.lower() for k in SLURM_OBJECT_KEYS)
_RENDERED_SLURM_KEYS_LOWER = frozenset(k.lower() for k in RENDERED_SLURM_KEYS)


def slurm_parameter(key: str, value: str) -> None:
    """An extra slurm.conf ``Key=Value``: a parameter name and a one-line value without comments.

    Slurm compares keys without case (``nodename=`` declares nodes too), and so does this check.
    """
    if not _SLURM_KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not a slurm.conf parameter name (letters and digits)")
    if key.lower() in _SLURM_OBJECT_KEYS_LOWER or key.lower() == "include":
        raise ValueError(f"{key} declares nodes, partitions or files: use the spec's own fields")
    if key.lower() in _RENDERED_SLURM_KEYS_LOWER:
        raise ValueError(f"{key} is rendered from the spec: set the spec field instead (docs/spec-reference.md)")
    if not _SLURM_VALUE.fullmatch(value) or not value.strip():
        raise ValueError(f"{key}={value!r}: the value must be one line of 1-1024 characters without '#', '\"' or '\\'")


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


def hostlist_expression(value: str) -> str:
    """A Slurm hostlist expression (``gpu[001-064],login01``) that expands to host names."""
    hostlist.expand(value)
    return value


def node_selector(value: str) -> str:
    """Comma-separated node group names and hostlist expressions (``gpu,login[01-02]``)."""
    for part in hostlist.split_top_level(value):
        if not re.fullmatch(NAME, part):
            hostlist.expand(part)
    return value


DnsName = Annotated[str, AfterValidator(dns_name)]
HostOrIp = Annotated[str, AfterValidator(host_or_ip)]
HostPort = Annotated[str, AfterValidator(host_port)]
IpAddress = Annotated[str, AfterValidator(ip_address)]
Ipv4Address = Annotated[str, AfterValidator(ipv4_address)]
Ipv4Start = Annotated[str, AfterValidator(ipv4_start)]
IpNetwork = Annotated[str, AfterValidator(ip_network)]
HttpUrl = Annotated[str, AfterValidator(http_url)]
WebhookUrl = Annotated[str, AfterValidator(webhook_url)]
EmailAddress = Annotated[str, AfterValidator(email_address)]
MigProfileName = Annotated[str, AfterValidator(mig_profile_name)]
NodeSelector = Annotated[str, AfterValidator(node_selector)]
PosixUser = Annotated[str, AfterValidator(posix_user)]
PlainText = Annotated[str, AfterValidator(plain_text)]
LocalPath = Annotated[str, AfterValidator(local_path)]
RegistryRef = Annotated[str, AfterValidator(registry_ref)]
