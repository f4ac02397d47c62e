"""Package readings: installed versions of a chosen set of Debian packages in one round trip."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuforge.probes._common import as_name_list, parse_marker
from gpuforge.probes.reading import Reading

#: Debian package name, optionally qualified with an architecture (``libc6:amd64``).
DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.\-]*(?::[a-z0-9\-]+)?$")


def deb_is_installed(status_abbrev: str) -> bool:
    """True when a ``${db:Status-Abbrev}`` value (e.g. ``ii``, ``hi``, ``rc``) means unpacked and configured."""
    return len(status_abbrev) >= 2 and status_abbrev[1] == "i"


def parse_dpkg_query(lines: list[str]) -> dict[str, str | None]:
    """Parse ``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` output.

    The ``__query=`` marker lists the requested names so that packages dpkg does not know
    (or only remembers as ``rc``: removed, config files left) map to None.
    """
    requested: list[str] = []
    found: dict[str, str] = {}
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            if marker[0] == "query":
                requested.extend(marker[1].split())
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, status = parts[0].strip(), parts[1].strip(), parts[2].strip()
        if name and version and deb_is_installed(status) and name not in found:
            found[name] = version
    result: dict[str, str | None] = {}
    for name in requested or list(found):
        base = name.split(":", 1)[0]
        result[name] = found.get(name, found.get(base))
    return result


def rpm_query_command(packages: Sequence[str] | str) -> str:
    """``rpm -q`` of ``packages`` in the output format of :func:`dpkg_query_command` (``version-release``,
    status ``ii``), so that ``parse_dpkg_query`` reads both."""
    names = as_name_list(packages, "package name", DEB_NAME_RE)
    joined = " ".join(names)
    return (
        f"echo '__query={joined}'; "
        f"rpm -q --qf '%{{NAME}}\\t%{{VERSION}}-%{{RELEASE}}\\tii\\n' {joined} 2>/dev/null "
        "| grep -v ' is not installed'; "
        "true"
    )


def dpkg_query_command(packages: Sequence[str] | str) -> str:
    """The shell command whose output ``parse_dpkg_query`` reads."""
    names = as_name_list(packages, "package name", DEB_NAME_RE)
    joined = " ".join(names)
    return (
        f"echo '__query={joined}'; "
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {joined} 2>/dev/null; "
        "true"
    )


DEB_VERSIONS: Reading[dict[str, str | None]] = Reading("packages.deb_versions", dpkg_query_command, parse_dpkg_query)
