"""One loaded cluster, passed down as a value: the parsed spec and every location derived from its file.

Invariants: the spec file is read once, where a command starts (:func:`load_cluster`, or
:meth:`Cluster.of` for a spec the command line loaded already); below the command line no module
opens the spec file or derives a location from its path: each takes what it needs from the
:class:`Cluster`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from gpuforge.spec.discovered import facts_path
from gpuforge.spec.errors import Loc
from gpuforge.spec.load import load_spec_and_text
from gpuforge.spec.model import Spec
from gpuforge.spec.state_dir import state_root


def spec_key(source: Path) -> str:
    """The key of a spec file's control-host state (its records and lock): its resolved path, hashed.

    Keyed by the file (not the cluster name), so renaming the cluster in the file is seen as a
    change of that cluster, not as a new one."""
    return hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:16]


def _expanded(value: str | None) -> Path | None:
    return Path(os.path.expanduser(value)) if value else None


@dataclass(frozen=True)
class Cluster:
    """A parsed spec, where it came from, and where its state lives on the control host."""

    spec: Spec
    path: Path
    """The spec file as the operator named it (messages)."""
    source: Path
    """The spec file, resolved (the run log, the deploys' host data)."""
    folder: Path
    """The spec file's folder (vagrant machines, site files)."""
    state_dir: Path
    """The control host's state root (``GPUFORGE_STATE_DIR``, else the XDG state folder)."""
    applied_record: Path
    """The spec of the last successful apply of this file."""
    rollout_record: Path
    """What a run leaves for the next run of this file (nodes drained, nodes converged)."""
    lock_file: Path
    """The control host's run lock of this file."""
    ssh_key: Path | None
    known_hosts: Path | None
    facts_file: Path
    """The figures ``gpuforge discover`` read from the nodes, beside the spec file."""
    text: str | None = None
    """The spec file's text as :func:`load_cluster` read it (None: the caller parsed the spec itself)."""

    @classmethod
    def of(cls, spec: Spec, path: str | Path, text: str | None = None) -> Cluster:
        """The cluster of ``spec``, already loaded from ``path`` (the file is not read again)."""
        given = Path(path)
        source = given.resolve()
        root, key = state_root(), spec_key(source)
        return cls(
            spec, given, source, source.parent, root,
            applied_record=root / "applied" / f"{key}.json",
            rollout_record=root / "rollout" / f"{key}.json",
            lock_file=root / "locks" / f"{key}.lock",
            ssh_key=_expanded(spec.ssh.key),
            known_hosts=_expanded(spec.ssh.known_hosts),
            facts_file=facts_path(given), text=text,
        )  # fmt: skip

    def with_spec(self, spec: Spec) -> Cluster:
        """The same file's locations with another spec (the last applied one: the nodes it had)."""
        return replace(self, spec=spec, ssh_key=_expanded(spec.ssh.key), known_hosts=_expanded(spec.ssh.known_hosts))


def load_cluster(path: str | Path, waive: frozenset[Loc] = frozenset()) -> Cluster:
    """Read and check the spec file once (:func:`~gpuforge.spec.load_spec`) and derive its locations."""
    spec, text = load_spec_and_text(path, waive)
    return Cluster.of(spec, path, text)
