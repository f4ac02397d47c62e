"""A helm release an add-on installs, read beside the add-ons' stamps and compared with them.

Invariants:

* One fact read per release, in the layer's single round trip: ``helm history --max 1 -o json``
  with its exit status on the first line (``rc=<n>``) and helm's combined output after it.
* The read ends in exactly one of three cases (:func:`read_release`): *present* (exit 0 and a
  revision in the JSON), *missing* (helm failed saying ``release: not found``) or *unreadable*
  (anything else: API server unreachable, helm missing, RBAC, a timeout; helm's last line kept).
* A stamp is ``<digest> revision:<n>``, the revision helm reported right after the upgrade; it is
  written only when helm reports one.
* :func:`release_drift` answers only for a readable release: an unreadable one is never taken for
  a missing one (the caller reports it and compares nothing).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass

from gpuforge.deploy.facts.layer import CommandRead
from gpuforge.spec import k8s_upstream

KUBECONFIG = f"KUBECONFIG={k8s_upstream.ADMIN_CONF}"
HELM = "/usr/local/bin/helm"
#: Between the digest and the release revision in a helm add-on's stamp.
REVISION_MARK = " revision:"
#: What helm says of a release that does not exist (k8s_upstream.SOURCES "helm-release-not-found").
RELEASE_NOT_FOUND = "release: not found"

_RC = re.compile(r"rc=(\d+)")


@dataclass(frozen=True)
class HelmRelease:
    """The helm release an add-on installs; its live state is read beside the stamps."""

    name: str
    namespace: str

    @property
    def history(self) -> str:
        """The release's newest revision as JSON on stdout (helm's errors on stderr)."""
        argv = [HELM, *k8s_upstream.helm_history_latest_args(self.name, self.namespace)]
        return " ".join([KUBECONFIG, *(shlex.quote(x) for x in argv)])

    @property
    def key(self) -> str:
        """Where the layer's facts hold the read (``LayerFacts.contents``), see :func:`read_release`."""
        return f"helm-release:{self.namespace}/{self.name}"

    @property
    def read(self) -> CommandRead:
        """The fact read: ``rc=<helm's exit status>``, then helm's stdout and stderr."""
        return CommandRead(self.key, f'out=$({self.history} 2>&1); echo "rc=$?"; printf \'%s\\n\' "$out"')

    def stamp_command(self, digest: str, stamp: str) -> str:
        """Write ``<digest> revision:<n>`` with the revision helm reports now (after the upgrade);
        fails, leaving no stamp, when helm reports none."""
        sed = shlex.quote(k8s_upstream.HELM_HISTORY_REVISION_SED)
        folder = posixpath.dirname(stamp)
        return (
            f'rev=$({self.history} | sed -n {sed}) && test -n "$rev" && install -d -m 0755 {folder} && '
            f'echo {shlex.quote(digest)}"{REVISION_MARK}$rev" > {stamp}'
        )


@dataclass(frozen=True)
class ReleaseRead:
    """What the fact read says: ``live`` (revision, status) when present, ``missing`` when helm
    said there is no such release, else ``error`` (helm's last line: the release is unreadable)."""

    live: tuple[int, str] | None = None
    missing: bool = False
    error: str | None = None


def live_release(history: str | None) -> tuple[int, str] | None:
    """(revision, status) of a release's newest revision from ``helm history --max 1 -o json``
    (the first line that is a JSON list; helm's warnings may share the output); None when there
    is no such line or no revision in it."""
    for line in (history or "").splitlines():
        if not line.startswith("["):
            continue
        try:
            entries = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entries, list):
            continue
        revisions = [e for e in entries if isinstance(e, dict) and isinstance(e.get("revision"), int)]
        if revisions:
            newest = max(revisions, key=lambda e: int(e["revision"]))
            return int(newest["revision"]), str(newest.get("status", ""))
    return None


def read_release(output: str | None) -> ReleaseRead:
    """The three cases of :attr:`HelmRelease.read`'s output (None: the read printed nothing)."""
    first, _, rest = (output or "").partition("\n")
    rc = _RC.fullmatch(first.strip())
    if rc is None:
        return ReleaseRead(error="no exit status from helm history")
    lines = [line.strip() for line in rest.splitlines() if line.strip()]
    if rc.group(1) == "0":
        live = live_release(rest)
        return ReleaseRead(live=live) if live else ReleaseRead(error="helm history printed no revision")
    last = lines[-1] if lines else f"helm history exited {rc.group(1)}"
    if RELEASE_NOT_FOUND in last:
        return ReleaseRead(missing=True)
    return ReleaseRead(error=last)


def release_drift(release: HelmRelease, stamp: str | None, read: ReleaseRead) -> str | None:
    """Why the release must be installed again although its stamp's digest is current (None: it
    need not): it is missing, not ``deployed``, or at another revision than the stamp recorded.
    Only for a readable release (``read.error`` None)."""
    _, _, recorded = (stamp or "").strip().rpartition(REVISION_MARK)
    if read.live is None:
        return f"release {release.name} not found in namespace {release.namespace}"
    revision, status = read.live
    if status != k8s_upstream.HELM_RELEASE_DEPLOYED:
        return f"release {release.name} is {status or 'in no state'} (revision {revision})"
    if str(revision) != recorded:
        return f"release {release.name} is at revision {revision}, gpuforge applied revision {recorded or '?'}"
    return None
