"""pyinfra facts over the parsers in :mod:`gpuforge.probes.dcgm` (one command round trip each)."""

from __future__ import annotations

import re
import shlex

from pyinfra.api import FactBase

from gpuforge.probes._common import as_bool, guarded
from gpuforge.probes.dcgm import (
    DcgmiDiagInfo,
    ExporterMetricsInfo,
    _empty_diag,
    parse_dcgmi_diag,
    parse_exporter_metrics,
)


class DcgmiDiag(FactBase[DcgmiDiagInfo]):
    """Run ``dcgmi diag -r LEVEL`` (1 is quick; 3+ takes many minutes) and parse the results."""

    def command(self, level: int | str = 1, json_output: bool | str = False) -> str:
        if str(level).strip() not in {"1", "2", "3", "4"}:
            raise ValueError(f"dcgmi diag level must be 1-4, not {level!r}")
        return guarded("dcgmi", f"dcgmi diag -r {int(level)}{' -j' if as_bool(json_output) else ''}")

    @staticmethod
    def default() -> DcgmiDiagInfo:
        return _empty_diag(False, None)

    def process(self, output: list[str]) -> DcgmiDiagInfo:
        return parse_dcgmi_diag(output)


class DcgmExporterMetrics(FactBase[ExporterMetricsInfo]):
    """Scrape dcgm-exporter (default ``http://localhost:9400/metrics``) from the node itself."""

    def command(self, url: str = "http://localhost:9400/metrics") -> str:
        if not re.match(r"^https?://[^\s'\"]+$", url):
            raise ValueError(f"invalid metrics URL: {url!r}")
        return guarded("curl", f"curl -sf --max-time 10 {shlex.quote(url)}")

    @staticmethod
    def default() -> ExporterMetricsInfo:
        return ExporterMetricsInfo(available=False, rc=None, error=None, metrics={})

    def process(self, output: list[str]) -> ExporterMetricsInfo:
        return parse_exporter_metrics(output)
