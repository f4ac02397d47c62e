"""One fact read per node for a run that changes nothing: the layers' reads, merged.

Each layer reads its host's state in one round trip (``LayerState``). On a no-op re-apply those
reads were most of the run: about ten per node, each a shell, a ``dpkg-query``, a digest pass and
a ``systemctl show`` on the node. A run now registers every layer a node will converge while
pyinfra prepares the operations, and the node's first layer reads them all in ONE command (the
requests merged: one ``dpkg-query``, one digest pass, one ``systemctl show``); each layer then
takes its own part of that read (:func:`project`), exactly what its own read would have returned.

Invariant: a merged read stands only while the run has changed nothing on any node. Once any
operation ran a command or failed (:meth:`FactPrefetch.invalidate`), every later layer reads its
own state at its turn, as before: what a layer plans from is never older than the run's last
change, on its own node or another (a restart elsewhere, a node that joined).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuforge.deploy.converge import LayerFacts, package_name


@dataclass(frozen=True)
class FactRequest:
    """What one layer reads: the arguments of the ``LayerState`` fact, as tuples."""

    packages: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    read_paths: tuple[str, ...] = ()
    """Paths, and ``CommandRead`` entries (a key that names a read-only command)."""
    rpm: bool = False

    def kwargs(self) -> dict[str, Any]:
        """``LayerState``'s keyword arguments (``rpm`` only when set, as the layers pass it)."""
        args: dict[str, Any] = {
            "packages": list(self.packages),
            "paths": list(self.paths),
            "units": list(self.units),
            "accounts": list(self.accounts),
            "read_paths": list(self.read_paths),
        }
        if self.rpm:
            args["rpm"] = True
        return args

    def identity(self) -> tuple[Any, ...]:
        """Equal for requests that read the same (a ``CommandRead`` compares as its key string
        alone; here its command counts too)."""
        reads = tuple((str(r), _command_of(r)) for r in self.read_paths)
        return (self.packages, self.paths, self.units, self.accounts, reads, self.rpm)


def _command_of(entry: str) -> str | None:
    return getattr(entry, "command", None)


def merge(requests: Iterable[FactRequest]) -> tuple[FactRequest, list[FactRequest]]:
    """One request that reads everything ``requests`` read (first occurrence order), and the
    requests it covers. A request is left out (read on its own) when its package query kind
    (dpkg or rpm) differs from the first one's, or it reads a command under a key another
    request uses for a different command."""
    covered: list[FactRequest] = []
    packages: dict[str, None] = {}
    paths: dict[str, None] = {}
    units: dict[str, None] = {}
    accounts: dict[str, None] = {}
    reads: dict[str, str] = {}
    rpm: bool | None = None
    for request in requests:
        if rpm is not None and request.rpm != rpm:
            continue
        if any(str(r) in reads and _command_of(reads[str(r)]) != _command_of(r) for r in request.read_paths):
            continue
        rpm = request.rpm
        covered.append(request)
        packages.update(dict.fromkeys(request.packages))
        paths.update(dict.fromkeys(request.paths))
        units.update(dict.fromkeys(request.units))
        accounts.update(dict.fromkeys(request.accounts))
        for r in request.read_paths:
            reads.setdefault(str(r), r)
    merged = FactRequest(tuple(packages), tuple(paths), tuple(units), tuple(accounts), tuple(reads.values()), bool(rpm))
    return merged, covered


def project(facts: LayerFacts, request: FactRequest) -> LayerFacts:
    """The part of a merged read that ``request`` asked for: what its own read would return."""

    def only(values: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
        return {str(k): values[str(k)] for k in keys if str(k) in values}

    return LayerFacts(
        packages=only(facts.packages, (package_name(p) for p in request.packages)),  # read by name, not pin
        files=only(facts.files, request.paths),
        units=only(facts.units, request.units),
        accounts=only(facts.accounts, request.accounts),
        contents=only(facts.contents, request.read_paths),
        pending=set(facts.pending) if request.units else set(),
        dpkg_interrupted=facts.dpkg_interrupted if request.packages and not request.rpm else False,
    )


@dataclass
class FactPrefetch:
    """The registered requests and merged reads of one pyinfra run (a run with site Ansible steps
    makes one per segment: the steps between segments change the nodes)."""

    registered: dict[str, list[FactRequest]] = field(default_factory=dict)
    """Per host, every request its layers will make, in operation order (prepare time)."""
    covers: dict[str, set[tuple[Any, ...]]] = field(default_factory=dict)
    """Per host: the identities of the requests its merged read covers (set by :meth:`pending`)."""
    merged: dict[str, LayerFacts] = field(default_factory=dict)
    """Per host: the merged read."""
    stale: bool = False
    """Something changed (or failed) in this run: merged reads no longer stand."""

    def register(self, host: str, request: FactRequest) -> None:
        self.registered.setdefault(host, []).append(request)

    def invalidate(self) -> None:
        self.stale = True
        self.merged.clear()

    def pending(self, host: str) -> FactRequest | None:
        """The merged request to read for ``host`` now, or None (already read, stale, nothing registered)."""
        if self.stale or host in self.merged or not self.registered.get(host):
            return None
        request, covered = merge(self.registered[host])
        self.covers[host] = {r.identity() for r in covered}
        return request

    def store(self, host: str, facts: LayerFacts) -> None:
        """Keep the host's merged read (the answer to :meth:`pending`'s request)."""
        self.merged[host] = facts

    def lookup(self, host: str, request: FactRequest) -> LayerFacts | None:
        """``request``'s part of the host's merged read, or None when it has to read on its own."""
        if self.stale or host not in self.merged or request.identity() not in self.covers.get(host, set()):
            return None
        return project(self.merged[host], request)
