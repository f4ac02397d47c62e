"""rpm-md repositories (``repodata/``), read and written: stdlib only.

The layout is the one ``createrepo_c`` writes and NVIDIA documents for its own driver
repositories (NVIDIA/yum-packaging-precompiled-kmod README, "Generate metadata":
``createrepo_c -v --database repo/``, then ``modifyrepo_c modules.yaml repo/repodata``):
``repodata/repomd.xml`` names each metadata file (``primary``, ``filelists``, ``other``,
``modules``) with its location, size and checksums; ``primary`` lists every package with its
EVR, checksum, location, provides, requires and the files other packages may require.

Version order is rpm's (``rpmvercmp``): segments of digits compare as numbers, of letters
as strings, a digit segment is newer than a letter one, ``~`` sorts before anything and ``^``
before anything but the end. An EVR compares epoch, then version, then release only where both sides
name one (a requirement without a release matches every release).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import yaml
import zstandard

REPO_NS = "http://linux.duke.edu/metadata/repo"
COMMON_NS = "http://linux.duke.edu/metadata/common"
RPM_NS = "http://linux.duke.edu/metadata/rpm"
FILELISTS_NS = "http://linux.duke.edu/metadata/filelists"
OTHER_NS = "http://linux.duke.edu/metadata/other"
REPOMD = "repodata/repomd.xml"
REPOMD_SIG = "repodata/repomd.xml.asc"
#: Metadata the bundle carries: primary (required), filelists and other (copied for the
#: chosen packages), modules (the streams the nodes enable).
CARRIED = ("primary", "filelists", "other", "modules")
#: A fixed timestamp: the same packages give byte-identical metadata (a re-run writes nothing).
FIXED_TIME = 946684800
SAFE_RPM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._~^-]*\.rpm$")


class MetadataError(Exception):
    """Repository metadata that cannot be read."""


# --------------------------------------------------------------------------- versions


def _segments(s: str) -> Iterator[str]:
    yield from re.findall(r"~|\^|[0-9]+|[A-Za-z]+", s)


def rpmvercmp(a: str, b: str) -> int:
    """rpm's comparison of two version (or release) strings: -1, 0 or 1."""
    if a == b:
        return 0
    sa, sb = list(_segments(a)), list(_segments(b))
    i = 0
    while True:
        x = sa[i] if i < len(sa) else None
        y = sb[i] if i < len(sb) else None
        i += 1
        if x == "~" or y == "~":
            if x != y:
                return -1 if x == "~" else 1
            continue
        if x == "^" or y == "^":
            if x == y:
                continue
            if x is None:
                return -1
            if y is None:
                return 1
            return -1 if x == "^" else 1  # a caret sorts before anything but the end
        if x is None or y is None:
            return 0 if x == y else (-1 if x is None else 1)
        if x.isdigit() != y.isdigit():
            return 1 if x.isdigit() else -1
        if x.isdigit():
            xi, yi = int(x), int(y)
            if xi != yi:
                return 1 if xi > yi else -1
        elif x != y:
            return 1 if x > y else -1


@dataclass(frozen=True)
class Evr:
    """epoch:version-release (``rel`` None: a requirement naming no release)."""

    epoch: int
    ver: str
    rel: str | None = None

    def __str__(self) -> str:
        head = f"{self.epoch}:" if self.epoch else ""
        return f"{head}{self.ver}" + (f"-{self.rel}" if self.rel is not None else "")


def evr_cmp(a: Evr, b: Evr) -> int:
    if a.epoch != b.epoch:
        return 1 if a.epoch > b.epoch else -1
    c = rpmvercmp(a.ver, b.ver)
    if c or a.rel is None or b.rel is None:
        return c
    return rpmvercmp(a.rel, b.rel)


_FLAG_OK = {
    "EQ": lambda c: c == 0,
    "LT": lambda c: c < 0,
    "LE": lambda c: c <= 0,
    "GT": lambda c: c > 0,
    "GE": lambda c: c >= 0,
}


@dataclass(frozen=True)
class Dep:
    """A provides or requires entry: a name, and optionally a comparison with an EVR."""

    name: str
    flags: str | None = None
    evr: Evr | None = None

    def __str__(self) -> str:
        ops = {"EQ": "=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
        return self.name if self.flags is None or self.evr is None else f"{self.name} {ops[self.flags]} {self.evr}"

    def matched_by(self, evr: Evr | None) -> bool:
        """Does a provide at ``evr`` (None: unversioned, which rpm lets match anything) satisfy this?"""
        if self.flags is None or self.evr is None or evr is None:
            return True
        check = _FLAG_OK.get(self.flags)
        return check is None or check(evr_cmp(evr, self.evr))


@dataclass(frozen=True)
class RpmPackage:
    """One package entry of ``primary``."""

    name: str
    arch: str
    evr: Evr
    pkgid: str
    checksum_type: str
    href: str
    size: int | None
    provides: tuple[Dep, ...]
    requires: tuple[Dep, ...]
    files: tuple[str, ...]

    @property
    def version(self) -> str:
        """``[epoch:]version-release``, as pins are written (``570.86.15-1.el9``, ``1:4.2.3-1``)."""
        return str(self.evr)

    @property
    def nevra(self) -> str:
        """``name-epoch:version-release.arch``, as modulemd artifacts list packages."""
        return f"{self.name}-{self.evr.epoch}:{self.evr.ver}-{self.evr.rel}.{self.arch}"


# --------------------------------------------------------------------------- reading


def open_md(path: Path) -> IO[bytes]:
    """A downloaded metadata file, decompressed as it is read (by its name's suffix): large
    ``primary``/``filelists`` files are streamed, never held whole."""
    name = path.name
    if name.endswith(".zck"):
        raise MetadataError(f"{name}: zchunk files are not read by gpuforge (gz, xz, bz2, zst are)")
    if name.endswith(".zst"):
        return cast(IO[bytes], zstandard.ZstdDecompressor().stream_reader(path.open("rb"), closefd=True))
    opener: Any = next((o for suffix, o in _OPENERS.items() if name.endswith(suffix)), open)
    return cast(IO[bytes], opener(path, "rb"))


_OPENERS: dict[str, Any] = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
Source = bytes | Path  # uncompressed bytes, or a downloaded (compressed) file


def _open(src: Source) -> IO[bytes]:
    return io.BytesIO(src) if isinstance(src, bytes) else open_md(src)


@dataclass(frozen=True)
class MdRecord:
    """One ``<data>`` entry of repomd.xml."""

    kind: str
    href: str
    checksum_type: str
    checksum: str
    size: int | None


def parse_repomd(data: bytes) -> dict[str, MdRecord]:
    """The metadata files repomd.xml lists, by type."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise MetadataError(f"repomd.xml: not XML ({e})") from None
    out: dict[str, MdRecord] = {}
    for d in root.findall(f"{{{REPO_NS}}}data"):
        loc = d.find(f"{{{REPO_NS}}}location")
        ck = d.find(f"{{{REPO_NS}}}checksum")
        size = d.findtext(f"{{{REPO_NS}}}size")
        if loc is None or ck is None or not ck.text:
            continue
        href = loc.get("href", "")
        if not href.startswith("repodata/") or "/" in href[len("repodata/") :] or ".." in href:
            raise MetadataError(f"repomd.xml: {d.get('type')} at {href!r}, not a file in repodata/")
        out[d.get("type", "")] = MdRecord(
            d.get("type", ""), href, ck.get("type", "sha256"), ck.text.strip(), int(size) if size else None
        )
    if "primary" not in out:
        raise MetadataError("repomd.xml lists no primary metadata")
    return out


def _deps(fmt: ET.Element | None, tag: str) -> tuple[Dep, ...]:
    if fmt is None:
        return ()
    out = []
    for e in fmt.findall(f"{{{RPM_NS}}}{tag}/{{{RPM_NS}}}entry"):
        ver = e.get("ver")
        evr = Evr(int(e.get("epoch") or 0), ver, e.get("rel")) if ver is not None else None
        out.append(Dep(e.get("name", ""), e.get("flags"), evr))
    return tuple(out)


def _package(el: ET.Element) -> RpmPackage:
    v = el.find(f"{{{COMMON_NS}}}version")
    ck = el.find(f"{{{COMMON_NS}}}checksum")
    loc = el.find(f"{{{COMMON_NS}}}location")
    size = el.find(f"{{{COMMON_NS}}}size")
    fmt = el.find(f"{{{COMMON_NS}}}format")
    if v is None or ck is None or loc is None or not ck.text:
        raise MetadataError(f"primary: package {el.findtext(f'{{{COMMON_NS}}}name')!r} lacks version/checksum/location")
    files = tuple(f.text or "" for f in fmt.findall(f"{{{COMMON_NS}}}file")) if fmt is not None else ()
    return RpmPackage(
        name=el.findtext(f"{{{COMMON_NS}}}name", ""),
        arch=el.findtext(f"{{{COMMON_NS}}}arch", ""),
        evr=Evr(int(v.get("epoch") or 0), v.get("ver", ""), v.get("rel", "")),
        pkgid=ck.text.strip(),
        checksum_type=ck.get("type", "sha256"),
        href=loc.get("href", ""),
        size=int(size.get("package", "")) if size is not None and size.get("package", "").isdigit() else None,
        provides=_deps(fmt, "provides"),
        requires=_deps(fmt, "requires"),
        files=files,
    )


def _elements(src: Source, tag: str) -> Iterator[ET.Element]:
    """Each ``tag`` element of a large document, cleared once the caller is done with it."""
    try:
        with _open(src) as stream:
            root: ET.Element | None = None
            for event, el in ET.iterparse(stream, events=("start", "end")):
                if root is None:
                    root = el
                if event == "end" and el.tag == tag:
                    yield el
                    root.clear()
    except ET.ParseError as e:
        raise MetadataError(f"not XML ({e})") from None
    except (OSError, EOFError, lzma.LZMAError, zstandard.ZstdError) as e:
        raise MetadataError(f"cannot decompress ({e})") from None


def parse_primary(src: Source) -> list[RpmPackage]:
    """Every package of a primary.xml (uncompressed bytes, or a downloaded file)."""
    return [_package(el) for el in _elements(src, f"{{{COMMON_NS}}}package")]


# --------------------------------------------------------------------------- writing


def _pkgid(kind: str, el: ET.Element) -> str:
    if kind == "primary":
        return (el.findtext(f"{{{COMMON_NS}}}checksum") or "").strip()
    return el.get("pkgid", "")


_ROOTS = {
    "primary": ("metadata", COMMON_NS, {"rpm": RPM_NS}),
    "filelists": ("filelists", FILELISTS_NS, {}),
    "other": ("otherdata", OTHER_NS, {}),
}


def filter_metadata(kind: str, src: Source, hrefs: dict[str, str]) -> bytes:
    """``primary``/``filelists``/``other`` reduced to the packages in ``hrefs`` (pkgid -> new
    location, a file name beside repodata/), in the upstream order, uncompressed."""
    tag, ns, extra = _ROOTS[kind]
    ET.register_namespace("", ns)
    for prefix, uri in extra.items():
        ET.register_namespace(prefix, uri)
    root = ET.Element(f"{{{ns}}}{tag}")
    kept = 0
    for el in _elements(src, f"{{{ns}}}package"):
        pid = _pkgid(kind, el)
        if pid not in hrefs:
            continue
        copy = _copy(el)
        if kind == "primary":
            loc = copy.find(f"{{{COMMON_NS}}}location")
            if loc is not None:
                loc.attrib.clear()
                loc.set("href", hrefs[pid])
        root.append(copy)
        kept += 1
    root.set("packages", str(kept))
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="UTF-8", xml_declaration=True)
    return buf.getvalue() + b"\n"


def _copy(el: ET.Element) -> ET.Element:
    new = ET.Element(el.tag, dict(el.attrib))
    new.text, new.tail = el.text, el.tail
    for child in el:
        new.append(_copy(child))
    return new


def filter_modules(data: bytes, streams: Iterable[tuple[str, str]]) -> bytes | None:
    """modules.yaml keeping the ``modulemd`` documents of ``streams`` ((name, stream)) and the
    ``modulemd-defaults`` of their modules; None when none of them is there."""
    wanted = set(streams)
    names = {n for n, _ in wanted}
    try:
        docs = [d for d in yaml.safe_load_all(data) if isinstance(d, dict)]
    except yaml.YAMLError as e:
        raise MetadataError(f"modules.yaml: not YAML ({e})") from None
    kept: list[dict[str, Any]] = []
    for d in docs:
        body: dict[str, Any] = d["data"] if isinstance(d.get("data"), dict) else {}
        stream_doc = d.get("document") == "modulemd" and (str(body.get("name")), str(body.get("stream"))) in wanted
        defaults_doc = d.get("document") == "modulemd-defaults" and str(body.get("module")) in names
        if stream_doc or defaults_doc:
            kept.append(d)
    if not any(d.get("document") == "modulemd" for d in kept):
        return None
    text = yaml.safe_dump_all(kept, explicit_start=True, explicit_end=True, sort_keys=False)
    return text.encode()


def module_artifacts(data: bytes) -> dict[tuple[str, str], set[str]]:
    """(module, stream) -> the NEVRAs its ``artifacts.rpms`` lists."""
    out: dict[tuple[str, str], set[str]] = {}
    try:
        docs = list(yaml.safe_load_all(data))
    except yaml.YAMLError as e:
        raise MetadataError(f"modules.yaml: not YAML ({e})") from None
    for d in docs:
        if not isinstance(d, dict) or d.get("document") != "modulemd" or not isinstance(d.get("data"), dict):
            continue
        body = d["data"]
        rpms = (body.get("artifacts") or {}).get("rpms") or []
        out.setdefault((str(body.get("name")), str(body.get("stream"))), set()).update(str(r) for r in rpms)
    return out


@dataclass(frozen=True)
class MdFile:
    """A metadata file written for the bundle: its type, name under repodata/ and bytes."""

    kind: str
    name: str
    data: bytes


def compress_md(kind: str, plain: bytes) -> tuple[MdFile, str, int]:
    """(the gzip file named by its checksum, as createrepo_c names them; open sha256; open size)."""
    packed = gzip.compress(plain, mtime=0)
    sha = hashlib.sha256(packed).hexdigest()
    suffix = "modules.yaml" if kind == "modules" else f"{kind}.xml"
    return MdFile(kind, f"{sha}-{suffix}.gz", packed), hashlib.sha256(plain).hexdigest(), len(plain)


def render_repomd(files: list[tuple[MdFile, str, int]]) -> bytes:
    """repomd.xml for the written metadata files (fixed revision and timestamps)."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<repomd xmlns="{REPO_NS}" xmlns:rpm="{RPM_NS}">',
        f"  <revision>{FIXED_TIME}</revision>",
    ]
    for md, open_sha, open_size in files:
        sha = hashlib.sha256(md.data).hexdigest()
        lines += [
            f'  <data type="{md.kind}">',
            f'    <checksum type="sha256">{sha}</checksum>',
            f'    <open-checksum type="sha256">{open_sha}</open-checksum>',
            f'    <location href="repodata/{md.name}"/>',
            f"    <timestamp>{FIXED_TIME}</timestamp>",
            f"    <size>{len(md.data)}</size>",
            f"    <open-size>{open_size}</open-size>",
            "  </data>",
        ]
    lines.append("</repomd>")
    return ("\n".join(lines) + "\n").encode()
