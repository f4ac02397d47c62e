"""The spec against NVIDIA's published releases and support matrix (``gpuforge.spec.nvidia_releases``).

Every finding is a warning (``gpuforge check`` prints it and exits 0; ``--strict`` makes it exit 2),
because a site may run outside the matrix on purpose (a lab on Debian's own 535 driver, say) and a
release newer than the table is not wrong, only unchecked:

* ``release_warning``: a well-formed driver version that is not a release of its branch in the
  table, or of a branch the table lacks: it names what could not be checked and what is known;
* ``support_warnings``: a combination outside NVIDIA's published support (a driver branch past its
  end of life, a new feature branch, Kubernetes outside the GPU Operator's validated range for an
  OS, a driver the operator does not ship, a CUDA toolkit newer than the driver's CUDA major, an
  enroot older than pyxis needs).

Malformed versions are refused by the spec's patterns, not here.
Everything takes ``today`` so that tests pin the date; nothing reads the network.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from datetime import date

from gpuforge.spec import nvidia_releases as rel
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.fabric_rules import fabric_warnings
from gpuforge.spec.model import ManagedBy, Role, Scheduler, Spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.nvidia_releases import BRANCHES, DESIGNATIONS, GPU_OPERATOR, RELEASES, Branch


def _release_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def known_releases_text(branches: list[int] | None = None) -> str:
    """``535: 535.54.03 ... 535.309.01; 550: ...``: the table's releases, per branch."""
    wanted = branches if branches is not None else list(RELEASES)
    return "; ".join(f"{b}: {' '.join(RELEASES[b])}" for b in wanted if b in RELEASES)


def release_warning(version: str) -> str | None:
    """What could not be checked about driver ``version`` (None: a release the table knows)."""
    branch = int(version.split(".")[0])
    if version in RELEASES.get(branch, ()):
        return None
    if branch in RELEASES:
        head = f"driver {version} is not a release of branch {branch} in gpuforge's table"
        known = f"its releases there: {known_releases_text([branch])}"
    else:
        head = f"driver branch {branch} ({version}) has no releases in gpuforge's table"
        known = f"known branches {', '.join(map(str, RELEASES))} with releases {known_releases_text()}"
    return (
        f"{head}, so gpuforge could not check that NVIDIA published it (a newer release is fine: add it to "
        f"gpuforge/spec/nvidia_releases.py with its source); {known}"
    )


def end_of_life_date(branch: Branch) -> date | None:
    """The last day of the end-of-life month (NVIDIA names months), or None where none is published."""
    if branch.end_of_life is None:
        return None
    year, month = (int(p) for p in branch.end_of_life.split("-"))
    return date(year, month, calendar.monthrange(year, month)[1])


def month_text(ym: str) -> str:
    """``2028-06`` -> ``June 2028``."""
    year, month = ym.split("-")
    return f"{calendar.month_name[int(month)]} {year}"


def supported_branches(today: date) -> list[str]:
    """``580 (long term support branch, until June 2028)``, ... for branches supported on ``today``."""
    out = []
    for number, b in BRANCHES.items():
        eol = end_of_life_date(b)
        if b.designation in ("LTSB", "PB") and eol is not None and eol >= today and number in RELEASES:
            out.append(f"{number} ({DESIGNATIONS[b.designation]}, until {month_text(b.end_of_life or '')})")
    return out


def branch_warning(branch: int, today: date) -> str | None:
    """Why ``branch`` is outside NVIDIA's support on ``today`` (None: a supported LTSB or PB)."""
    b = BRANCHES.get(branch)
    instead = f"supported branches: {', '.join(supported_branches(today))}"
    if b is None:
        return f"driver branch {branch} has no entry in NVIDIA's driver lifecycle that gpuforge knows; {instead}"
    cite = rel.SOURCES[b.cite].where
    eol = end_of_life_date(b)
    if b.designation == "NFB":
        until = f" (end of life {month_text(b.end_of_life)})" if b.end_of_life else ""
        if eol is None or eol >= today:
            return (
                f"driver branch {branch} is a new feature branch{until}: NVIDIA qualifies long term support and "
                f"production branches for production ({cite}); {instead}"
            )
    if eol is not None and eol < today:
        ended = month_text(b.end_of_life or "")
        return f"driver branch {branch} reached NVIDIA's end of life ({ended}, {cite}); {instead}"
    return None


def _driver_warnings(spec: Spec, today: date) -> Iterator[SpecIssue]:
    drv = spec.versions.driver
    if drv is None:
        return
    unchecked = release_warning(drv.version)
    if unchecked:
        yield SpecIssue(("versions", "driver", "version"), unchecked)
    why = branch_warning(int(drv.branch), today)
    if why:
        yield SpecIssue(("versions", "driver", "version"), why)
    toolkit = spec.versions.cuda_toolkit
    b = BRANCHES.get(int(drv.branch))
    if toolkit and b is not None and int(toolkit.split(".")[0]) > b.cuda_major:
        yield SpecIssue(
            ("versions", "cuda_toolkit"),
            f"CUDA {toolkit} needs a CUDA {toolkit.split('.')[0]} driver; branch {drv.branch} supports CUDA "
            f"{b.cuda_major} at most ({rel.SOURCES[b.cite].where})",
        )


def _operator_warnings(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    version = "v" + spec.versions.gpu_operator.lstrip("v")
    op = GPU_OPERATOR.get(version)
    where = ("versions", "gpu_operator")
    if op is None:
        yield SpecIssue(where, f"GPU Operator {version} is not in gpuforge's table (known: {', '.join(GPU_OPERATOR)})")
        return
    if op.status != "supported":
        yield SpecIssue(where, f"GPU Operator {version} is {op.status} ({rel.SOURCES['operator-lifecycle'].title})")
    minor = int(spec.versions.kubernetes.split(".")[1])
    platforms = rel.SOURCES[op.cites[-1]].title
    oses = sorted({n.os for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER) and n.hardware.gpu is not None})
    for os in oses:
        rng = op.kubernetes.get(os)
        if rng is None:
            yield SpecIssue(("cluster", "os"), f"GPU Operator {version} is not validated on {os.value} ({platforms})")
        elif not rng[0] <= minor <= rng[1]:
            yield SpecIssue(
                ("versions", "kubernetes"),
                f"Kubernetes {spec.versions.kubernetes} on {os.value} is outside GPU Operator {version}'s validated "
                f"range 1.{rng[0]}-1.{rng[1]} ({platforms})",
            )
    drv = spec.versions.driver
    if k.gpu_operator.driver is ManagedBy.OPERATOR and drv is not None and drv.version not in op.drivers:
        yield SpecIssue(
            ("versions", "driver", "version"),
            f"GPU Operator {version} ships driver containers for {', '.join(op.drivers)}, not {drv.version} "
            f"(gpu_operator.driver: operator; {rel.SOURCES['operator-matrix'].title})",
        )


def _pyxis_warnings(spec: Spec) -> Iterator[SpecIssue]:
    if spec.slurm is None or not spec.slurm.containers.pyxis:
        return
    if _release_tuple(spec.versions.enroot) < _release_tuple(rel.PYXIS_MIN_ENROOT):
        yield SpecIssue(
            ("versions", "enroot"),
            f"pyxis needs enroot {rel.PYXIS_MIN_ENROOT} or newer ({rel.SOURCES['pyxis-requires'].where})",
        )


def support_warnings(spec: Spec, today: date | None = None) -> list[SpecIssue]:
    """Every combination of ``spec`` outside NVIDIA's published support on ``today`` (default: now)."""
    when = today or date.today()
    return [*_driver_warnings(spec, when), *_operator_warnings(spec), *_pyxis_warnings(spec), *fabric_warnings(spec)]
