"""Rendered files and the jinja2 environment shared by all renderers."""

from __future__ import annotations

import hashlib
import importlib.resources
import io
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, wraps
from pathlib import Path
from typing import Any, BinaryIO, ParamSpec, TypeVar

import jinja2

#: ``templates/`` of the checkout, shipped in the wheel as the package ``gpuforge.templates``.
TEMPLATES_DIR = Path(str(importlib.resources.files("gpuforge.templates")))
REDACTED = "<redacted: kept in the gpuforge secrets store>"


@dataclass(frozen=True)
class LocalSource:
    """A control-host file pushed as it is (an offline bundle's packages and release files).

    Streamed: its digest is computed reading 1 MiB at a time (once per run and file version) and
    the upload reads from the open file, so a bundle of any size is never held in memory.
    """

    path: str

    @property
    def size(self) -> int:
        return os.stat(self.path).st_size

    @property
    def sha256(self) -> str:
        st = os.stat(self.path)
        return _file_sha256(self.path, st.st_mtime_ns, st.st_size)


@cache
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    del mtime_ns, size  # cache key only: a changed file is hashed again
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class RenderedFile:
    """A file as it must be on a node: rendered text or bytes, or a control-host file (streamed)."""

    path: str
    content: str | bytes | LocalSource
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    secret: bool = False
    """Holds a secret: never printed or diffed; placeholders stand in for the values in plans."""
    redact: Callable[[str], str] | None = field(default=None, compare=False)
    """How the text is shown (plan diffs, ``render -o``) when it holds credentials from the spec:
    a function that hides them (:mod:`gpuforge.spec.redact`), applied to the node's old copy too.
    None: shown as it is. Never changes what is written to the node."""
    keyed: bool = False
    """Carries keyed digests of secret-bearing files (the health config): its bytes depend on the
    real secrets, so it is compared only with a rendering made with them (never the redacted one)."""

    @property
    def data(self) -> bytes:
        """The whole content in memory (rendered files; avoid for a LocalSource)."""
        if isinstance(self.content, LocalSource):
            return Path(self.content.path).read_bytes()
        return self.content.encode() if isinstance(self.content, str) else self.content

    @property
    def shown(self) -> bytes:
        """The content as plans and ``render -o`` show it: :attr:`redact` applied to rendered text."""
        if self.redact is None or not isinstance(self.content, str):
            return self.data
        return self.redact(self.content).encode()

    @property
    def streamed(self) -> bool:
        return isinstance(self.content, LocalSource)

    @property
    def size(self) -> int:
        return self.content.size if isinstance(self.content, LocalSource) else len(self.data)

    @property
    def sha256(self) -> str:
        if isinstance(self.content, LocalSource):
            return self.content.sha256
        return hashlib.sha256(self.data).hexdigest()

    def open(self) -> BinaryIO:
        """The content as a file object: the control-host file itself for a LocalSource."""
        if isinstance(self.content, LocalSource):
            return open(self.content.path, "rb")
        return io.BytesIO(self.data)


@dataclass(frozen=True)
class Secrets:
    """Secret values the renderers may need. ``redacted()`` is what plans and `render` use."""

    slurmdbd_db_password: str
    munge_key: bytes
    k8s_pki: Mapping[str, bytes] = field(default_factory=dict)
    """The Kubernetes cluster's shared keys by name under /etc/kubernetes/pki (empty: redacted)."""
    health_key: bytes | None = None
    """The cluster's health key, from which each node's HMAC key is derived
    (``gpuforge.render.health.node_health_key``); None: redacted (no keyed digest is computed)."""

    @classmethod
    def redacted(cls) -> Secrets:
        return cls(slurmdbd_db_password=REDACTED, munge_key=REDACTED.encode())

    def with_k8s_pki(self, pki: Mapping[str, bytes]) -> Secrets:
        """These secrets with the Kubernetes cluster's shared keys."""
        return replace(self, k8s_pki=dict(pki))


P = ParamSpec("P")
R = TypeVar("R")


def per_spec(fn: Callable[P, R]) -> Callable[P, R]:
    """Memoize a renderer of cluster-wide text for one spec object (and its other arguments).

    Files such as slurm.conf or /etc/hosts are the same on every node: rendering them once
    per spec instead of once per node keeps a 1,000-node render well under a second. Specs
    are frozen but hold lists (unhashable), so entries are keyed by identity and keep the
    spec alive while cached.
    """
    memo: dict[tuple[Any, ...], tuple[Any, R]] = {}

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        spec = args[0]
        key = (id(spec), *args[1:], *sorted(kwargs.items()))
        hit = memo.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        value = fn(*args, **kwargs)
        if len(memo) > 256:
            memo.clear()
        memo[key] = (spec, value)
        return value

    return wrapper


@cache
def environment() -> jinja2.Environment:
    """The jinja2 environment over ``templates/`` (strict: a missing variable is an error)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,
    )


def render_template(name: str, **context: Any) -> str:
    """Render ``templates/<name>`` with ``context``."""
    return environment().get_template(name).render(**context)


def header(comment: str = "#") -> str:
    """The managed-file header line."""
    return f"{comment} Managed by gpuforge: edit the cluster spec, not this file.\n"
