"""Configuration drift: every file gpuforge manages on a node, as the node has it, against what the
spec renders for that node (content, owner, mode).

Read in one round trip per node (``files.digests`` of every managed path); only where a
non-secret file's content differs, one more round trip fetches those files' texts for a unified
diff. Secret files (the munge key, slurmdbd.conf) are compared by content too when this control
host holds the secrets apply wrote (``spec.state_dir``: read, never created): their digests are
compared here, in memory, never printed or stored, and a difference is "content differs", never
a diff. A secret file whose rendering does not hold a stored secret (Kubernetes keys, or no store
here) is compared by owner and mode only. The health config carries keyed digests made with the
real secrets (``RenderedFile.keyed``): compared with its rendering under the stored secrets (its
digests hidden in any diff), or by owner and mode where they are not all here.

Invariant: a diff shows both sides redacted the same way (the file's own ``redact``, then
credentials in any URL): the node's copy of a file holding credentials (an Alertmanager webhook
password) is passed through the same function as the spec's, so no output format (terminal, JSON,
JUnit, the run log: all take the check's message) carries them.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuforge.probes.files import FileDigest
from gpuforge.render import render_node
from gpuforge.render.files import LocalSource, RenderedFile, Secrets
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.redact import redact_url_credentials
from gpuforge.spec.state_dir import DB_PASSWORD_FILE, HEALTH_KEY_FILE, MUNGE_KEY_FILE, stored_secret

#: Lines of a unified diff shown per file (the rest is counted, not shown).
DIFF_LINES = 40


@dataclass(frozen=True)
class Expected:
    """A managed file as the spec renders it: ``sha256`` None where the content is not compared
    (a secret, whose rendered text is a placeholder)."""

    path: str
    sha256: str | None
    mode: str
    owner: str
    group: str
    text: str | None  # what a diff is made against (shown form: credentials from the spec redacted)
    redact: Callable[[str], str] | None = field(default=None, compare=False)  # the file's, for the node's side


@dataclass
class Drift:
    """What differs in one file; ``diff`` for a non-secret file whose content differs."""

    path: str
    problems: list[str]
    content_differs: bool = False
    diff: list[str] = field(default_factory=list)


def _sha256(f: RenderedFile) -> str:
    if isinstance(f.content, LocalSource):
        h = hashlib.sha256()
        with open(f.content.path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    return hashlib.sha256(f.data).hexdigest()


def stored_secrets(spec: Spec) -> Secrets | None:
    """The secrets apply stored on this control host for the spec's cluster (None: not all here)."""
    key, password = (stored_secret(spec.cluster.name, n) for n in (MUNGE_KEY_FILE, DB_PASSWORD_FILE))
    if key is None or password is None:
        return None
    health = stored_secret(spec.cluster.name, HEALTH_KEY_FILE)  # None: stored by an older gpuforge
    return Secrets(slurmdbd_db_password=password.decode("utf-8", "replace"), munge_key=key, health_key=health)


def expected_files(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[Expected]:
    """Every file the node gets from the spec. A secret file's digest is that of its rendering with
    ``secrets`` when that rendering holds them (differs from the redacted one), else None (owner
    and mode only); its text is never kept."""
    real = {f.path: f for f in render_node(spec, node, secrets)} if secrets is not None else {}
    keyed = secrets is not None and secrets.health_key is not None
    return [_expected(f, real.get(f.path), keyed) for f in render_node(spec, node)]


def _expected(f: RenderedFile, real: RenderedFile | None, keyed: bool) -> Expected:
    """``f`` (redacted rendering) as compared; ``real``: its rendering with the stored secrets, which
    hold the health key when ``keyed`` (a ``keyed`` file is compared with that rendering, or not at all)."""
    if f.keyed:
        f, sha = (real, _sha256(real)) if keyed and real is not None else (f, None)
    else:
        sha = _secret_sha256(f, real) if f.secret else _sha256(f)
    hidden = f.secret or isinstance(f.content, LocalSource) or (f.keyed and sha is None)
    text = None if hidden else f.shown.decode("utf-8", "replace")
    return Expected(f.path, sha, f.mode.zfill(4), f.owner, f.group, text, f.redact)


def _secret_sha256(redacted: RenderedFile, real: RenderedFile | None) -> str | None:
    if real is None or isinstance(real.content, LocalSource) or real.data == redacted.data:
        return None
    return hashlib.sha256(real.data).hexdigest()


def managed_units(spec: Spec, node: Node, files: list[RenderedFile] | None = None) -> list[str]:
    """Units whose unit file or a drop-in gpuforge writes on the node (``/etc/systemd/system/<unit>[.d/]``);
    ``files``: the node's rendered files, when the caller has them."""
    units = set()
    for f in files if files is not None else render_node(spec, node):
        parts = f.path.split("/")  # "", etc, systemd, system, <unit>[.d], [<drop-in>]
        if f.path.startswith("/etc/systemd/system/") and len(parts) in (5, 6):
            units.add(parts[4].removesuffix(".d"))
    return sorted(u for u in units if u.endswith((".service", ".timer", ".socket", ".mount")))


def compare(expected: list[Expected], have: dict[str, FileDigest | None]) -> list[Drift]:
    """The files whose state on the node is not the rendered one, in path order."""
    drifts = []
    for want in expected:
        got = have.get(want.path)
        if got is None:
            drifts.append(Drift(want.path, ["missing"]))
            continue
        problems = []
        if got["type"] != "file":
            problems.append(f"is a {got['type']}, not a file")
        if want.sha256 is not None and got["sha256"] != want.sha256:
            problems.append("content differs")
        if got["mode"].zfill(4) != want.mode:
            problems.append(f"mode {got['mode'].zfill(4)}, want {want.mode}")
        if (got["owner"], got["group"]) != (want.owner, want.group):
            problems.append(f"owner {got['owner']}:{got['group']}, want {want.owner}:{want.group}")
        if problems:
            drifts.append(Drift(want.path, problems, content_differs="content differs" in problems))
    return drifts


def shown_text(text: str, redact: Callable[[str], str] | None) -> str:
    """``text`` as a diff may show it: the file's own redaction, then credentials in any URL."""
    return redact_url_credentials(redact(text) if redact is not None else text)


def add_diffs(drifts: list[Drift], expected: list[Expected], texts: dict[str, str | None]) -> None:
    """A unified diff (node's file -> rendered) for each drifted non-secret file whose text was read;
    both sides redacted alike (:func:`shown_text`)."""
    by_path = {e.path: e for e in expected}
    for d in drifts:
        want, have = by_path[d.path].text, texts.get(d.path)
        if not d.content_differs or want is None or have is None:
            continue
        redact = by_path[d.path].redact
        lines = list(
            difflib.unified_diff(
                shown_text(have, redact).splitlines(),
                shown_text(want, redact).splitlines(),
                f"{d.path} (on the node)",
                f"{d.path} (from the spec)",
                lineterm="",
            )
        )
        d.diff = lines[:DIFF_LINES] + (
            [f"... {len(lines) - DIFF_LINES} more diff lines"] if len(lines) > DIFF_LINES else []
        )


def diff_paths(drifts: list[Drift], expected: list[Expected]) -> list[str]:
    """The drifted files worth a second read for their text (non-secret, content differs)."""
    texts = {e.path for e in expected if e.text is not None}
    return [d.path for d in drifts if d.content_differs and d.path in texts]


def describe(drifts: list[Drift], total: int) -> str:
    """One line per drifted file, then the diffs."""
    if not drifts:
        return f"all {total} managed files match the spec (content, owner, mode)"
    head = f"{len(drifts)} of {total} managed files differ from the spec (gpuforge apply restores them): "
    lines = [head + "; ".join(f"{d.path}: {', '.join(d.problems)}" for d in drifts)]
    for d in drifts:
        lines += d.diff
    return "\n".join(lines)
