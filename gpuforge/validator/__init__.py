"""Validation of a running cluster against its spec (``gpuforge validate``, ``gpuforge health``).

- :mod:`.nodelocal`: the node-local checks, built into one stdlib-only file (installed as
  ``/usr/local/sbin/gpuforge-health``; also sent over SSH by ``validate``); what they read is
  :mod:`.node.inputs` (readings of :mod:`gpuforge.probes`), the Xids they judge
  :mod:`gpuforge.spec.xid_catalog`
- :mod:`.config`: ``health_config(spec, node)``, the node's ``/etc/gpuforge/health.json``
- :mod:`.cluster`: cluster-wide checks (sinfo/srun from the controller, kubectl, munge key, host keys)
- :mod:`.registry`: every check by id, selection with dependencies
- :mod:`.runner`: ``validate(loaded_cluster, checks=None, limit=None) -> Report``
- :mod:`.report`: the report as a rich table, JSON (``report.schema.json``), JUnit XML, Prometheus textfile
- :mod:`.cli`: ``validate_cmd`` and ``health_cmd`` for the ``gpuforge`` CLI
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuforge.validator.report import Report

__all__ = ["validate"]


def validate(*args: Any, **kwargs: Any) -> Report:
    """See :func:`gpuforge.validator.runner.validate`."""
    from gpuforge.validator.runner import validate as run

    return run(*args, **kwargs)
