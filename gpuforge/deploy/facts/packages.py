"""pyinfra facts over the parsers in :mod:`gpuforge.probes.packages` (one command round trip each)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import FactBase

from gpuforge.probes.packages import dpkg_query_command, parse_dpkg_query


class DebPackageVersions(FactBase[dict[str, str | None]]):
    """Installed version of each requested Debian package (None when not installed)."""

    def command(self, packages: Sequence[str] | str) -> str:
        return dpkg_query_command(packages)

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, str | None]:
        return parse_dpkg_query(output)
