"""The Slurm facts the deploys read (:mod:`gpuforge.probes.slurm`)."""

from __future__ import annotations

from gpuforge.deploy.facts.adapter import reading_fact
from gpuforge.probes.slurm import SACCTMGR

#: QOS, accounts and associations from slurmdbd (one round trip, three sacctmgr calls).
SacctmgrEntities = reading_fact(SACCTMGR)
