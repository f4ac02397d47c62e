"""pyinfra facts over the parsers in :mod:`gpuforge.probes.systemd` (one command round trip each)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import FactBase

from gpuforge.probes.systemd import UnitStatesInfo, parse_systemctl_show, unit_states_command


class UnitStates(FactBase[UnitStatesInfo]):
    """Load/active/sub state, enablement and main PID of several units at once."""

    def command(self, units: Sequence[str] | str) -> str:
        return unit_states_command(units)

    @staticmethod
    def default() -> UnitStatesInfo:
        return UnitStatesInfo(error=None, units={})

    def process(self, output: list[str]) -> UnitStatesInfo:
        return parse_systemctl_show(output)
