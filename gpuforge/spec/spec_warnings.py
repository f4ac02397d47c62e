"""Every warning about a spec in one list: what gpuforge could not check, and what lies outside
upstream's published support. A warning never refuses a spec (``gpuforge check`` exits 0);
``check/plan/apply --strict`` turn any warning into exit 2, for CI. The CLI adds the release files
whose sha256 nobody knows (``gpuforge.bundle.digest_warnings.every_warning``: what a spec installs is
known on the deploy side, which this layer does not import)."""

from __future__ import annotations

from datetime import date

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.hardware_rules import hardware_warnings
from gpuforge.spec.model import Spec
from gpuforge.spec.nvidia_support import support_warnings
from gpuforge.spec.support_windows import window_warnings


def all_warnings(spec: Spec, today: date | None = None) -> list[SpecIssue]:
    """The spec's warnings on ``today`` (default: now), in a stable order: NVIDIA's support matrix and
    driver releases first, then the Kubernetes windows of the add-ons, then the node hardware's
    plausibility (and groups still to discover)."""
    when = today or date.today()
    return [*support_warnings(spec, when), *window_warnings(spec, when), *hardware_warnings(spec)]


def strict_failure(warnings: list[SpecIssue]) -> str | None:
    """The ``--strict`` error line for ``warnings`` (None: there are none)."""
    return f"error: --strict: {len(warnings)} warning(s)" if warnings else None
