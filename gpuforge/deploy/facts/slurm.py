"""pyinfra facts over the parsers in :mod:`gpuforge.probes.slurm` (one command round trip each)."""

from __future__ import annotations

from pyinfra.api import FactBase

from gpuforge.probes._common import guarded
from gpuforge.probes.slurm import (
    SACCTMGR_QUERIES,
    SINFO_FORMAT,
    SacctmgrInfo,
    ScontrolNodeInfo,
    ScontrolPartitionInfo,
    SinfoInfo,
    SlurmdHardwareInfo,
    SlurmVersionInfo,
    parse_sacctmgr,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sinfo_nodes,
    parse_slurm_version,
    parse_slurmd_c,
)


class SinfoNodes(FactBase[SinfoInfo]):
    """Node states, partitions and GRES from ``sinfo`` (flags such as ``*``/``~`` split out)."""

    def command(self) -> str:
        return guarded("sinfo", f"sinfo -h -N -o '{SINFO_FORMAT}'")

    @staticmethod
    def default() -> SinfoInfo:
        return SinfoInfo(available=False, rc=None, error=None, messages=[], nodes={})

    def process(self, output: list[str]) -> SinfoInfo:
        return parse_sinfo_nodes(output)


class ScontrolNodes(FactBase[ScontrolNodeInfo]):
    """Every node's full record (State, Reason, Gres, CfgTRES, Partitions, ...) from the controller."""

    def command(self) -> str:
        return guarded("scontrol", "scontrol show node -o")

    @staticmethod
    def default() -> ScontrolNodeInfo:
        return ScontrolNodeInfo(available=False, rc=None, error=None, messages=[], nodes={})

    def process(self, output: list[str]) -> ScontrolNodeInfo:
        return parse_scontrol_nodes(output)


class ScontrolPartitions(FactBase[ScontrolPartitionInfo]):
    """Every partition's record from the controller."""

    def command(self) -> str:
        return guarded("scontrol", "scontrol show partition -o")

    @staticmethod
    def default() -> ScontrolPartitionInfo:
        return ScontrolPartitionInfo(available=False, rc=None, error=None, messages=[], partitions={})

    def process(self, output: list[str]) -> ScontrolPartitionInfo:
        return parse_scontrol_partitions(output)


class SacctmgrEntities(FactBase[SacctmgrInfo]):
    """QOS, accounts and associations from slurmdbd (one round trip, three sacctmgr calls)."""

    def command(self) -> str:
        parts = []
        for section, (entity, fields) in SACCTMGR_QUERIES.items():
            parts.append(
                f"echo '__section={section}'; "
                f"sacctmgr -nP show {entity} format={','.join(fields)} 2>&1; "
                'echo "__rc=$?"'
            )
        return (
            "if command -v sacctmgr >/dev/null 2>&1; then " + "; ".join(parts) + "; else echo '__missing=sacctmgr'; fi"
        )

    @staticmethod
    def default() -> SacctmgrInfo:
        return SacctmgrInfo(available=False, error=None, rc={}, messages=[], qos=[], account=[], assoc=[])

    def process(self, output: list[str]) -> SacctmgrInfo:
        return parse_sacctmgr(output)


class SlurmdHardware(FactBase[SlurmdHardwareInfo]):
    """Hardware as slurmd detects it (the NodeName line to put in slurm.conf)."""

    def command(self) -> str:
        return guarded("slurmd", "slurmd -C")

    @staticmethod
    def default() -> SlurmdHardwareInfo:
        return SlurmdHardwareInfo(available=False, rc=None, error=None, messages=[], hardware={})

    def process(self, output: list[str]) -> SlurmdHardwareInfo:
        return parse_slurmd_c(output)


class SlurmVersion(FactBase[SlurmVersionInfo]):
    """Installed Slurm version from the client (``sinfo -V``) and the daemon (``slurmd -V``)."""

    def command(self) -> str:
        return (
            "for b in sinfo slurmd; do if command -v $b >/dev/null 2>&1; "
            'then echo "__bin=$b"; $b -V 2>&1; fi; done; echo "__done=1"'
        )

    @staticmethod
    def default() -> SlurmVersionInfo:
        return SlurmVersionInfo(version=None, sinfo=None, slurmd=None)

    def process(self, output: list[str]) -> SlurmVersionInfo:
        return parse_slurm_version(output)
