"""pyinfra facts over the parsers in :mod:`gpuforge.probes.mig` (one command round trip each)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from gpuforge.probes._common import guarded
from gpuforge.probes.mig import (
    MIG_MODE_FIELDS,
    GpuInstanceProfilesInfo,
    MigDevicesInfo,
    MigModeInfo,
    MigPartedAssertInfo,
    parse_mig_lgip,
    parse_mig_mode,
    parse_mig_parted_assert,
    parse_nvidia_smi_list,
)


class MigMode(FactBase[MigModeInfo]):
    """Current and pending MIG mode per GPU (a difference means a GPU reset is pending)."""

    def command(self) -> str:
        return guarded("nvidia-smi", f"nvidia-smi --query-gpu={','.join(MIG_MODE_FIELDS)} --format=csv,noheader")

    @staticmethod
    def default() -> MigModeInfo:
        return MigModeInfo(available=False, rc=None, error=None, messages=[], gpus=[])

    def process(self, output: list[str]) -> MigModeInfo:
        return parse_mig_mode(output)


class MigDevices(FactBase[MigDevicesInfo]):
    """GPUs and their MIG devices (profile names such as ``1g.10gb``) from ``nvidia-smi -L``."""

    def command(self) -> str:
        return guarded("nvidia-smi", "nvidia-smi -L")

    @staticmethod
    def default() -> MigDevicesInfo:
        return MigDevicesInfo(available=False, rc=None, error=None, messages=[], gpus=[])

    def process(self, output: list[str]) -> MigDevicesInfo:
        return parse_nvidia_smi_list(output)


class MigGpuInstanceProfiles(FactBase[GpuInstanceProfilesInfo]):
    """The MIG profiles each MIG-enabled GPU offers, with free/total counts (``nvidia-smi mig -lgip``)."""

    def command(self) -> str:
        return guarded("nvidia-smi", "nvidia-smi mig -lgip")

    @staticmethod
    def default() -> GpuInstanceProfilesInfo:
        return GpuInstanceProfilesInfo(available=False, rc=None, error=None, messages=[], profiles=[])

    def process(self, output: list[str]) -> GpuInstanceProfilesInfo:
        return parse_mig_lgip(output)


class MigPartedAssert(FactBase[MigPartedAssertInfo]):
    """Run ``nvidia-mig-parted assert -f FILE -c NAME`` (read-only check)."""

    def command(self, config_file: str, config_name: str) -> str:
        body = f"nvidia-mig-parted assert -f {shlex.quote(config_file)} -c {shlex.quote(config_name)}"
        return guarded("nvidia-mig-parted", body)

    @staticmethod
    def default() -> MigPartedAssertInfo:
        return MigPartedAssertInfo(available=False, applied=None, rc=None, message=None, output=[])

    def process(self, output: list[str]) -> MigPartedAssertInfo:
        return parse_mig_parted_assert(output)
