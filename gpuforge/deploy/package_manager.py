"""One package manager per package format: the commands every layer installs and reads packages with.

A node's platform row (``gpuforge.spec.platforms``) names its package format; :func:`manager_for`
gives that format's :class:`PackageManager` row: apt and dpkg for deb, dnf and rpm for rpm. The
planner (``converge.plan_layer``) and every layer that installs something take their commands
from the row, never from a tool's name.

Invariants:
- A pinned package is written ``name=version`` everywhere in gpuforge (apt's form); the row's
  :meth:`PackageManager.pin` writes it in its tool's form (``name-version`` for dnf).
- The deb row's commands are ``gpuforge.deploy.apt``'s, byte for byte (its repair, bounded
  update and install).
- dnf keeps no journal that an interrupted run leaves to be finished (rpm transactions are
  applied by rpm as a whole; dnf waits for another dnf's lock itself): the rpm row has no repair.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gpuforge.deploy.apt import APT_UPDATE, REPAIR, install_command
from gpuforge.probes.packages import dpkg_query_command, rpm_query_command
from gpuforge.spec.platforms import OsFamily, PackageFormat

DNF_INSTALL = "dnf -y install"
DNF_MAKECACHE = "dnf -q -y makecache"


@dataclass(frozen=True)
class PackageManager:
    """What one package format installs, refreshes, reads and holds packages with."""

    format: PackageFormat
    tool: str  # what a plan calls it: "apt", "dnf"
    pin_separator: str  # between name and version in an install argument
    refresh: str  # the package index refresh (apt-get update, dnf makecache)
    refresh_kind: str  # its converge.StepKind value
    refresh_title: str  # what a plan calls the refresh
    repair: str | None  # finishes an interrupted run before an install (None: nothing to finish)
    hold: str  # holds ``{names}`` at the installed version

    def pin(self, package: str) -> str:
        """``name=version`` in this tool's form (``name-version`` for dnf); a bare name or an option
        (``--disableexcludes=...``) unchanged."""
        if package.startswith("-"):
            return package
        name, sep, version = package.partition("=")
        return f"{name}{self.pin_separator}{version}" if sep else package

    def install(self, packages: Sequence[str], *, downgrades: bool = False, update_first: bool = False) -> str:
        """One transaction installing ``packages`` (``name`` or ``name=version``).

        deb: ``apt.install_command`` (repair first; lists refreshed when the install fails or, with
        ``update_first``, before it). rpm: ``dnf -y install`` of the pinned forms; dnf reads new
        repositories' metadata by itself and installs a named version whichever is installed.
        """
        if self.format is PackageFormat.DEB:
            return install_command(list(packages), downgrades=downgrades, update_first=update_first)
        return f"{DNF_INSTALL} " + " ".join(shlex.quote(self.pin(p)) for p in packages)

    def query(self, names: Sequence[str]) -> str:
        """The read of installed versions (``probes.packages.parse_dpkg_query`` reads both forms)."""
        return dpkg_query_command(names) if self.format is PackageFormat.DEB else rpm_query_command(names)

    def hold_command(self, names: Sequence[str]) -> str:
        return self.hold.format(names=" ".join(shlex.quote(n) for n in names))


MANAGERS: dict[PackageFormat, PackageManager] = {
    PackageFormat.DEB: PackageManager(
        PackageFormat.DEB, "apt", "=", APT_UPDATE, "apt-update", "apt-get update", REPAIR, "apt-mark hold {names}"
    ),
    PackageFormat.RPM: PackageManager(
        PackageFormat.RPM,
        "dnf",
        "-",
        DNF_MAKECACHE,
        "dnf-makecache",
        "dnf makecache",
        None,
        "dnf versionlock add {names}",
    ),
}

DEB = MANAGERS[PackageFormat.DEB]
RPM = MANAGERS[PackageFormat.RPM]


def manager_for(os: OsFamily) -> PackageManager:
    """The package manager of ``os``'s row in the platform table."""
    return MANAGERS[os.distribution.package_format]


def manager_of(rpm: bool) -> PackageManager:
    """The manager of a layer's package database (``Layer.rpm``)."""
    return RPM if rpm else DEB
