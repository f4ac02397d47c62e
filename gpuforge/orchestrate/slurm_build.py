"""Build SchedMD's Slurm packages from the release tarball, once per platform, before any node converges.

For each platform of the Slurm nodes (``render.slurm_build.build_inputs``), unless the control host
already has a verified build of the same inputs:

1. the tarball is fetched on the control host (a URL, or the offline bundle's ``artifacts/``) and kept
   only with the known sha256 (a corrupted or different file stops here, before any host is touched);
2. it is sent to the build host, which checks the sha256 again, installs the build dependencies and
   runs ``dpkg-buildpackage -b``, or on an EL host ``rpmbuild -ta`` (``render.slurm_build.build_script``);
3. the packages and their index (``Packages``; rpm-md ``repodata/``) come back as one bounded tar stream;
   every package file must match the index and every package gpuforge installs must be there at
   ``versions.slurm``;
4. the folder is signed (``InRelease``; ``repomd.xml.asc``; a key made for this build whose secret half
   is never kept) and renamed into ``<state root>/slurm-builds/<key>/`` in one step.

Invariant: a folder under ``slurm-builds/`` is either a complete, signed build or absent (work happens
in ``.<key>.part``); a failed build leaves no folder and converges no node.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from debian.deb822 import Packages

from gpuforge.bundle.fetch import Fetcher, FetchError
from gpuforge.bundle.rpmmd import REPOMD, REPOMD_SIG, MetadataError, parse_primary, parse_repomd
from gpuforge.bundle.signing import BundleSigner, SignatureError, inrelease_problem, release_text
from gpuforge.bundle.trust import repomd_problem
from gpuforge.orchestrate.remote import ssh_argv
from gpuforge.render import slurm_build as rb
from gpuforge.spec import resolve_nodes
from gpuforge.spec.bounded_read import NodeOutputError, run_bounded
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.platforms import PackageFormat
from gpuforge.validator.report import terminal_safe

BUILD_TIMEOUT = 3 * 3600.0
#: The most the built packages may weigh on the way back (24.11's debs: about 30 MB).
DOWNLOAD_LIMIT = 2 * 2**30
REPO, RECORD, PUBLIC_KEY = rb.REPO_FOLDER, rb.RECORD_FILE, rb.PUBLIC_KEY_FILE


class SlurmBuildError(Exception):
    """A build that did not produce a verified repository (the message says why; no node was converged)."""


@dataclass(frozen=True)
class BuildOutcome:
    inputs: rb.BuildInputs
    folder: Path
    cached: bool
    seconds: float


def builds_root(cluster: Cluster) -> Path:
    return cluster.state_dir / rb.BUILDS_FOLDER


def cached_build(cluster: Cluster, inputs: rb.BuildInputs) -> dict[str, object] | None:
    """The record of a complete build of ``inputs`` whose signature still covers its index (None: none)."""
    folder = rb.build_folder(cluster.state_dir, inputs)
    try:
        record = json.loads((folder / RECORD).read_text())
        key = (folder / PUBLIC_KEY).read_bytes()
    except (OSError, ValueError):
        return None
    problem = {PackageFormat.DEB: inrelease_problem, PackageFormat.RPM: repomd_problem}[inputs.format]
    if not isinstance(record, dict) or problem(folder, REPO, key) is not None:
        return None
    return record


def last_seconds(cluster: Cluster, inputs: rb.BuildInputs) -> float | None:
    """How long the last build of this platform and version took here (any options), if one was made."""
    for folder in sorted(builds_root(cluster).glob(f"{inputs.platform}-{inputs.version}-*")):
        try:
            seconds = json.loads((folder / RECORD).read_text()).get("seconds")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(seconds, int | float):
            return float(seconds)
    return None


def planned_builds(cluster: Cluster) -> list[str]:
    """What apply would do about each build, for ``plan``: cached (where, how long) or to be built."""
    lines = []
    for inputs in rb.build_inputs(cluster.spec).values():
        what = f"Slurm {inputs.version} for {inputs.platform}"
        record = cached_build(cluster, inputs)
        if record is not None:
            lines.append(f"{what}: cached ({inputs.key}, built on {record.get('host')} in {record.get('seconds')} s)")
            continue
        last = last_seconds(cluster, inputs)
        took = f"the last build of it here took {last:.0f} s" if last is not None else "never built here"
        lines.append(f"{what}: not cached: apply builds it on {inputs.host} first ({took})")
    return lines


def ensure_builds(cluster: Cluster, say: Callable[[str], None]) -> list[BuildOutcome]:
    """Every build the spec's Slurm nodes need, from the cache or built now (raises SlurmBuildError)."""
    out = []
    for inputs in rb.build_inputs(cluster.spec).values():
        folder = rb.build_folder(cluster.state_dir, inputs)
        record = cached_build(cluster, inputs)
        if record is not None:
            say(f"Slurm {inputs.version} for {inputs.platform}: cached ({folder.name})")
            out.append(BuildOutcome(inputs, folder, True, float(str(record.get("seconds", 0)))))
            continue
        say(f"Slurm {inputs.version} for {inputs.platform}: building on {inputs.host}")
        started = time.monotonic()
        build(cluster, inputs, tarball_file(cluster, inputs))
        seconds = time.monotonic() - started
        say(f"Slurm {inputs.version} for {inputs.platform}: built on {inputs.host} in {seconds:.0f} s")
        out.append(BuildOutcome(inputs, folder, False, seconds))
    return out


def publish_tar(cluster: Cluster, inputs: rb.BuildInputs) -> bytes:
    """The complete build of ``inputs`` as the tar stream ``render.slurm_build.publish_command`` reads
    (raises SlurmBuildError when the control host has no complete build of it)."""
    folder = rb.build_folder(cluster.state_dir, inputs)
    if cached_build(cluster, inputs) is None:
        raise SlurmBuildError(f"no complete build of Slurm {inputs.version} for {inputs.platform} here ({folder})")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted((folder / REPO).iterdir()):
            tar.add(path, f"{rb.PUBLISH_REPO}/{path.name}")  # an rpm build's repodata/ with its files
        tar.add(folder / rb.NODE_KEY_FILE[inputs.format], rb.PUBLISH_KEY, recursive=False)
        sources = rb.source_text(inputs).encode()
        info = tarfile.TarInfo(rb.PUBLISH_SOURCES)
        info.size, info.mode = len(sources), 0o644
        tar.addfile(info, io.BytesIO(sources))
    return buf.getvalue()


def publish(cluster: Cluster, nodes: list[str]) -> dict[str, str]:
    """Put the build of each node's platform in its apt sources (``slurm-upgrade``, before any daemon
    stops); failures by node (the reason bounded and made safe for a terminal)."""
    failures = {}
    by_name = {n.name: n for n in resolve_nodes(cluster.spec)}
    for name in nodes:
        inputs = rb.inputs_for(cluster.spec, by_name[name])
        if inputs is None:
            continue
        try:
            data = publish_tar(cluster, inputs)
            done = run_bounded(ssh_argv(cluster, name, rb.publish_command(inputs)), data, 600)
        except SlurmBuildError as e:
            failures[name] = str(e)
            continue
        except (subprocess.TimeoutExpired, NodeOutputError, OSError) as e:
            failures[name] = f"sending gpuforge's Slurm build: {e}"
            continue
        if done.returncode != 0:
            said = terminal_safe((done.stdout + done.stderr).decode("utf-8", "replace")).strip()[-400:]
            failures[name] = f"publishing gpuforge's Slurm build failed (exit {done.returncode}): {said}"
    return failures


def tarball_url(cluster: Cluster, inputs: rb.BuildInputs) -> str:
    """Where the tarball is fetched from: ``slurm.build.tarball``, else the offline bundle's artifacts/."""
    s = cluster.spec.slurm
    assert s is not None and s.build is not None
    if s.build.tarball:
        return s.build.tarball
    bundle = Path(cluster.spec.sources.bundle_dir or ".").expanduser().resolve()
    return (bundle / "artifacts" / inputs.file_name).as_uri()


def tarball_file(cluster: Cluster, inputs: rb.BuildInputs) -> Path:
    """The tarball on the control host, verified (kept by its sha256: fetched once for every platform)."""
    cache = builds_root(cluster) / "tarballs"
    dest = cache / f"{inputs.sha256}.tar.gz"
    if dest.is_file() and _sha256(dest) == inputs.sha256:
        return dest
    url = tarball_url(cluster, inputs)
    try:
        Fetcher(timeout=120).download(url, dest, cache / ".partial", {"sha256": inputs.sha256}, None)
    except FetchError as e:
        raise SlurmBuildError(
            f"Slurm {inputs.upstream}'s tarball: {e.reason}; nothing was built and no node was touched"
        ) from None
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def build(cluster: Cluster, inputs: rb.BuildInputs, tarball: Path) -> Path:
    """Build ``inputs`` on its host from the verified ``tarball`` and keep the signed result."""
    folder = rb.build_folder(cluster.state_dir, inputs)
    refuse_a_busy_build_host(cluster, inputs)
    part = folder.with_name(f".{folder.name}.part")
    shutil.rmtree(part, ignore_errors=True)
    (part / REPO).mkdir(parents=True, mode=0o700)
    started = time.monotonic()
    try:
        _remote(cluster, inputs, rb.upload_command(inputs), "send the tarball", tarball, timeout=600)
        _remote(cluster, inputs, rb.build_script(inputs), "build", timeout=BUILD_TIMEOUT)
        _download(cluster, inputs, part / REPO)
        _check_packages(inputs, part / REPO)
        _sign(part, inputs)
        record = {
            "version": inputs.version, "platform": inputs.platform, "sha256": inputs.sha256, "nvml": inputs.nvml,
            "host": inputs.host, "seconds": round(time.monotonic() - started, 1), "built": int(time.time()),
        }  # fmt: skip
        (part / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(part, folder)
    finally:
        shutil.rmtree(part, ignore_errors=True)
        _clean_build_host(cluster, inputs)
    return folder


def refuse_a_busy_build_host(cluster: Cluster, inputs: rb.BuildInputs) -> None:
    """Raise SlurmBuildError, before anything is sent, when the build host runs Slurm job steps
    (``render.slurm_build.busy_command``) or cannot say whether it does: the compile takes every core."""
    host = inputs.host
    try:
        done = run_bounded(ssh_argv(cluster, host, rb.busy_command()), b"", 120)
    except subprocess.TimeoutExpired:
        raise SlurmBuildError(f"{host}: no answer in 120 s to whether it runs Slurm jobs; nothing was built") from None
    except NodeOutputError as e:
        raise SlurmBuildError(f"{host}: whether it runs Slurm jobs: {e}; nothing was built") from None
    said = terminal_safe((done.stdout + done.stderr).decode("utf-8", "replace")).strip()[:600]
    if done.returncode == rb.BUSY_EXIT:
        raise SlurmBuildError(
            f"{host}, the build host of Slurm {inputs.version} for {inputs.platform}, runs Slurm job steps "
            f"({'; '.join(said.splitlines())}): the compile would take every core from them. Drain it and let "
            f"its jobs end (scontrol update NodeName={host} State=DRAIN Reason=...), or name a node that runs "
            "no jobs in slurm.build.hosts; nothing was built and no node was converged"
        )
    if done.returncode != 0:
        raise SlurmBuildError(
            f"{host}: could not tell whether it runs Slurm jobs (exit {done.returncode}): {said or 'no output'}; "
            "nothing was built and no node was converged"
        )


def _clean_build_host(cluster: Cluster, inputs: rb.BuildInputs) -> None:
    """Remove the build host's work folder; a host that does not answer keeps it (the next build empties it)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(ssh_argv(cluster, inputs.host, rb.cleanup_command(inputs)), capture_output=True, timeout=120)


def _remote(
    cluster: Cluster, inputs: rb.BuildInputs, command: str, what: str, stdin: Path | None = None, timeout: float = 600
) -> None:
    argv = ssh_argv(cluster, inputs.host, command)
    try:
        if stdin is not None:
            with stdin.open("rb") as f:
                done = subprocess.run(argv, stdin=f, capture_output=True, timeout=timeout)
        else:
            done = run_bounded(argv, b"", timeout)
    except subprocess.TimeoutExpired:
        raise SlurmBuildError(f"{inputs.host}: {what} did not finish in {timeout:.0f} s") from None
    except NodeOutputError as e:
        raise SlurmBuildError(f"{inputs.host}: {what}: {e}") from None
    if done.returncode != 0:
        # the node's output, shown on the operator's terminal: its escape sequences written as \xNN
        tail = terminal_safe((done.stdout + done.stderr).decode("utf-8", "replace")).strip().splitlines()[-45:]
        raise SlurmBuildError(
            f"{inputs.host}: {what} of Slurm {inputs.version} failed (exit {done.returncode}); no node was "
            "converged:\n" + "\n".join(tail)
        )


def _download(cluster: Cluster, inputs: rb.BuildInputs, into: Path) -> None:
    """The build host's debs and index, read as a tar stream of regular files with plain names only."""
    argv = ssh_argv(cluster, inputs.host, rb.download_command(inputs))
    stream = into.parent / "debs.tar"
    with stream.open("wb") as f:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        got = 0
        while chunk := proc.stdout.read(1 << 20):
            got += len(chunk)
            if got > DOWNLOAD_LIMIT:
                proc.kill()
                proc.wait()
                raise SlurmBuildError(f"{inputs.host}: the built packages exceed {DOWNLOAD_LIMIT:,} bytes")
            f.write(chunk)
        if proc.wait(timeout=600) != 0:
            raise SlurmBuildError(f"{inputs.host}: reading the built packages failed (exit {proc.returncode})")
    with tarfile.open(stream) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if _index_folder(inputs, name) and member.isdir():
                (into / name).mkdir(exist_ok=True)
                continue
            folder, _, base = name.rpartition("/")
            if not member.isreg() or (folder and not _index_folder(inputs, folder)) or base.startswith(".") or not base:
                raise SlurmBuildError(f"{inputs.host}: the built packages hold an unexpected entry {name!r}")
            src = tar.extractfile(member)
            assert src is not None
            (into / folder).mkdir(exist_ok=True)
            with src, (into / name).open("wb") as out:
                shutil.copyfileobj(src, out)
    stream.unlink()


def _index_folder(inputs: rb.BuildInputs, name: str) -> bool:
    """Is ``name`` the one folder the built packages may hold (an rpm build's ``repodata``)?"""
    return name == {PackageFormat.DEB: "", PackageFormat.RPM: "repodata"}[inputs.format] != ""


def _check_packages(inputs: rb.BuildInputs, repo: Path) -> None:
    """Every package file is what the index says, and every package gpuforge installs is there at
    ``versions.slurm`` (:func:`_check_debs`, :func:`_check_rpms`)."""
    {PackageFormat.DEB: _check_debs, PackageFormat.RPM: _check_rpms}[inputs.format](inputs, repo)


def _check_debs(inputs: rb.BuildInputs, repo: Path) -> None:
    """Every deb is what the index says (size, sha256), and every package gpuforge installs is there
    at ``versions.slurm``."""
    try:
        index = (repo / "Packages").read_text()
        stanzas = [(s["Filename"].removeprefix("./"), int(s["Size"]), s["SHA256"], s["Package"], s["Version"])
                   for s in Packages.iter_paragraphs(index, use_apt_pkg=False)]  # fmt: skip
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as e:
        raise SlurmBuildError(f"the built packages' index is not a Packages index ({type(e).__name__}: {e})") from None
    versions: dict[str, str] = {}
    listed = set()
    for name, size, sha256, package, version in stanzas:
        listed.add(name)
        path = repo / name
        if "/" in name or not path.is_file():
            raise SlurmBuildError(f"the built index lists {name}, which did not come back")
        if path.stat().st_size != size or _sha256(path) != sha256:
            raise SlurmBuildError(f"{name} is not the file the built index describes")
        versions[package] = version
    extra = {p.name for p in repo.glob("*.deb")} - listed
    if extra:
        raise SlurmBuildError(f"debs not in the built index: {', '.join(sorted(extra))}")
    _require(inputs, versions)


def _require(inputs: rb.BuildInputs, versions: dict[str, str]) -> None:
    """Every package gpuforge installs (``rb.required_packages``) was built at ``versions.slurm``."""
    wanted = rb.required_packages(inputs)
    wrong = [f"{p} ({versions.get(p, 'missing')})" for p in wanted if versions.get(p) != inputs.version]
    if wrong:
        raise SlurmBuildError(f"the build did not make these packages at {inputs.version}: {', '.join(wrong)}")


def _check_rpms(inputs: rb.BuildInputs, repo: Path) -> None:
    """repomd.xml's primary is the file it names (checksum), every rpm is the one primary describes
    (size, sha256) and none is left out of it; every package gpuforge installs is at ``versions.slurm``."""
    try:
        record = parse_repomd((repo / REPOMD).read_bytes())["primary"]
        primary = repo / record.href
        if record.checksum_type != "sha256" or _sha256(primary) != record.checksum:
            raise MetadataError(f"{record.href} is not the file repomd.xml describes")
        packages = parse_primary(primary)
    except (OSError, MetadataError) as e:
        raise SlurmBuildError(f"the built packages' index is not an rpm-md repository ({e})") from None
    versions: dict[str, str] = {}
    for p in packages:
        path = repo / p.href
        if "/" in p.href or not path.is_file():
            raise SlurmBuildError(f"the built index lists {p.href}, which did not come back")
        if p.checksum_type != "sha256" or path.stat().st_size != p.size or _sha256(path) != p.pkgid:
            raise SlurmBuildError(f"{p.href} is not the file the built index describes")
        versions[p.name] = p.version
    extra = {f.name for f in repo.glob("*.rpm")} - {p.href for p in packages}
    if extra:
        raise SlurmBuildError(f"rpms not in the built index: {', '.join(sorted(extra))}")
    _require(inputs, versions)


def _sign(part: Path, inputs: rb.BuildInputs) -> None:
    """The index signed with a key made for this build (apt: InRelease over Packages; dnf: repomd.xml.asc
    over repomd.xml); its public half beside the repo (and ASCII-armored for dnf)."""
    try:
        with BundleSigner(f"gpuforge Slurm build {inputs.key}") as signer:
            {PackageFormat.DEB: _sign_apt, PackageFormat.RPM: _sign_rpm}[inputs.format](part, signer)
            (part / PUBLIC_KEY).write_bytes(signer.public_key())
    except SignatureError as e:
        raise SlurmBuildError(f"signing the built repository: {e}") from None


def _sign_apt(part: Path, signer: BundleSigner) -> None:
    index = (part / REPO / "Packages").read_bytes()
    (part / REPO / "InRelease").write_bytes(signer.clearsign(release_text(REPO, {"Packages": index})))


def _sign_rpm(part: Path, signer: BundleSigner) -> None:
    repo = part / REPO
    (repo / REPOMD_SIG).write_bytes(signer.detach_sign((repo / REPOMD).read_bytes()))
    (part / rb.NODE_KEY_FILE[PackageFormat.RPM]).write_bytes(signer.public_key_armored())
