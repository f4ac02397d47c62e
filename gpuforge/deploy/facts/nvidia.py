"""The NVIDIA facts the deploys read (:mod:`gpuforge.probes.nvidia_host`)."""

from __future__ import annotations

from gpuforge.deploy.facts.adapter import reading_fact
from gpuforge.probes.nvidia_host import NVIDIA_HOST

#: GPUs and NVSwitches on the PCI bus, the loaded driver, chosen package versions (one round trip).
NvidiaHost = reading_fact(NVIDIA_HOST)
