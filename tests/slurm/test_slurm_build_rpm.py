"""``slurm.source: build`` on EL 9: SchedMD's ``slurm.spec`` (``gpuforge/render/slurm_build_rpm.py``).

Two kinds of check. The data: gpuforge's options, build dependencies and package names against what
``rpmspec`` printed for the real 24.11.5 tarball (``tests/slurm/upstream/slurm-24.11.5-rpmspec.txt``).
The build, run for real as ``test_slurm_build.py`` runs the deb one: this machine's bash is the build
host, the real ``rpmspec`` reads a small slurm.spec in the tarball, ``dnf`` and ``rpmbuild`` are stubs
(``rpmbuild`` hands over tiny real rpms made with the real rpmbuild), the real ``createrepo_c`` indexes
them; the control host checks and signs the repository, publishes it to a node, and the real dnf
installs ``slurm-slurmd`` from it at ``versions.slurm`` through the node's ``.repo`` file.

What never ran here: the compile of Slurm on an EL 9 host (``rpmbuild -ta`` of the real spec).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.trust import repomd_problem
from gpuforge.deploy.layers.slurm_repo import slurm_repo_layer
from gpuforge.deploy.package_manager import RPM
from gpuforge.orchestrate import slurm_build as sb
from gpuforge.render import slurm_build as rb
from gpuforge.render import slurm_build_rpm as rbr
from gpuforge.render.slurm import slurm_package
from gpuforge.spec import resolve_nodes
from gpuforge.spec import slurm_rpm_build as spec_rpm
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.platforms import DISTRIBUTIONS, OsFamily, PackageFormat
from gpuforge.spec.slurm_packages import LOGICAL, SlurmSource, package_for
from gpuforge.spec.slurm_tarballs import TARBALLS
from tests.bundle.conftest import Server
from tests.bundle.rpmrepo import Rpm, build_rpm, require_rpm_tools
from tests.bundle.test_rpm_bundle import dnf_root  # noqa: F401  (the fixture)
from tests.slurm.test_slurm_build import (
    cluster_of,
    host,  # noqa: F401  (the fixture)
)

FIXTURE = Path(__file__).parent / "upstream" / "slurm-24.11.5-rpmspec.txt"
VERSION = "25.05.9-1"
TOP = "slurm-slurm-25-05-9-1"
ROCKY_CRB = DISTRIBUTIONS[OsFamily.ROCKY9].crb

#: A slurm.spec cut down to what the build reads: its version, conditionals and their BuildRequires.
SPEC = """\
Name:\t\tslurm
Version:\t25.05.9
%define rel\t1
Release:\t%{rel}%{?dist}
Summary:\tfake
License:\tGPLv2+
%bcond_with pmix
%bcond_with jwt
%bcond_with nvml
BuildRequires: munge-devel
%if %{with pmix} && "%{_with_pmix}" == "--with-pmix"
BuildRequires: pmix
%endif
%if %{with jwt}
BuildRequires: libjwt-devel >= 1.10.0
%endif
%description
fake
"""
STUB_DNF = """#!/bin/sh
printf 'dnf' >> "$STUB_LOG"; printf ' [%s]' "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"
case "$*" in
  *libjwt*) [ -n "${FAIL_DEPS:-}" ] && { echo "Error: Unable to find a match: libjwt-devel" >&2; exit 1; } ;;
esac
exit 0
"""
STUB_RPMBUILD = """#!/bin/sh
printf 'rpmbuild' >> "$STUB_LOG"; printf ' [%s]' "$@" >> "$STUB_LOG"; echo >> "$STUB_LOG"
mkdir -p rpmbuild/RPMS/x86_64 && cp "$STUB_RPMS"/*.rpm rpmbuild/RPMS/x86_64/
"""


def sections() -> dict[str, list[str]]:
    """The recorded rpmspec outputs, by the command that printed them."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            out[current] = []
        else:
            out[current].append(line)
    return out


def section(prefix: str) -> list[str]:
    [lines] = [v for k, v in sections().items() if k.startswith(prefix)]
    return lines


# ------------------------------------------------------------------ the plan against the real spec


def test_the_options_are_the_ones_the_recorded_query_used_and_slurm_spec_declares() -> None:
    opts = " ".join(shlex.quote(a) for a in spec_rpm.rpmbuild_options(True))
    assert f"rpmspec -q --buildrequires {opts} slurm.spec" in sections()
    bconds = section("grep -E")
    for option in (*spec_rpm.WITH, spec_rpm.NVML_WITH):
        assert f"%bcond_with {option}" in bconds, option


def test_the_options_add_the_build_dependencies_slurm_spec_names_for_them() -> None:
    """With the options, the spec asks for hwloc, JWT, YAML, PMIx and UCX on top of its plain list (MariaDB
    and munge are always there); for PMIx it names the ``pmix`` package only, whose headers configure
    needs, hence gpuforge's pmix-devel; json-c-devel is not in it without slurmrestd."""
    built = section("rpmspec -q --buildrequires --with")
    plain = section("rpmspec -q --buildrequires slurm.spec")
    added = sorted(set(built) - set(plain))
    assert added == ["hwloc-devel", "libjwt-devel >= 1.10.0", "libyaml-devel >= 0.2.5", "pmix", "ucx-devel"]
    assert {"mariadb-devel >= 5.0.0", "munge-devel"} <= set(plain)
    assert "pmix-devel" not in built and "pmix-devel" in spec_rpm.EXTRA_BUILD_DEPENDS
    assert not [d for d in built if d.startswith("json-c")] and "json-c-devel" in spec_rpm.EXTRA_BUILD_DEPENDS


def test_the_packages_gpuforge_requires_and_installs_are_the_ones_slurm_spec_makes_at_versions_slurm() -> None:
    made = dict(line.split() for line in section("rpmspec -q --qf"))
    assert tuple(made) == spec_rpm.SPEC_PACKAGES
    assert set(made.values()) == {TARBALLS["24.11.5"].deb_version}, "no dist tag: the release is versions.slurm's"
    assert set(rb.REQUIRED_RPMS) <= set(made)
    installed = {package_for(SlurmSource.BUILD, False, role) for role in LOGICAL} - {None}
    assert installed == {"slurm", "slurm-slurmctld", "slurm-slurmd", "slurm-slurmdbd", "slurm-devel"}
    assert installed <= set(made)


def test_the_folder_and_tarball_name_follow_slurm_spec_s_rel_rule() -> None:
    assert spec_rpm.source_dir("24.11.5-1") == "slurm-24.11.5"
    assert spec_rpm.source_dir("24.11.5-2") == "slurm-24.11.5-2"


def test_a_deb_build_keeps_its_cache_key_and_an_rpm_build_s_key_covers_its_options() -> None:
    deb = rb.BuildInputs("debian12-x86_64", "24.11.5-1", "a" * 64, False, "n1", "x", None)
    data = json.dumps(["debian12-x86_64", "24.11.5-1", "a" * 64, False], separators=(",", ":"))
    assert deb.key == f"debian12-x86_64-24.11.5-1-{hashlib.sha256(data.encode()).hexdigest()[:16]}"
    rpm = rb.BuildInputs("rocky9-x86_64", "24.11.5-1", "a" * 64, False, "n1", "x", None, PackageFormat.RPM)
    data = json.dumps(
        ["rocky9-x86_64", "24.11.5-1", "a" * 64, False, spec_rpm.rpmbuild_options(False)], separators=(",", ":")
    )
    assert rpm.key == f"rocky9-x86_64-24.11.5-1-{hashlib.sha256(data.encode()).hexdigest()[:16]}"


# ------------------------------------------------------------------ the build, run here


def fake_tarball(spec: str = SPEC) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in ((f"{TOP}/slurm.spec", spec), (f"{TOP}/configure.ac", "AC_INIT\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def built_rpms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny real rpms of the packages gpuforge requires (and one more), as rpmbuild leaves them."""
    require_rpm_tools()
    work = tmp_path_factory.mktemp("rpms")
    out = work / "out"
    out.mkdir()
    for name in (*rb.REQUIRED_RPMS, "slurm-libpmi"):
        path = build_rpm(work, Rpm(name, VERSION, files=(f"/usr/share/doc/fake-{name}",)))
        path.rename(out / path.name)
    return out


@pytest.fixture
def el_host(host: Path, built_rpms: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """The build host of ``test_slurm_build`` with dnf and rpmbuild stubs (the real rpmspec and createrepo_c)."""
    stubs = Path(os.environ["PATH"].split(":")[0])
    for name, text in (("dnf", STUB_DNF), ("rpmbuild", STUB_RPMBUILD)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("STUB_RPMS", str(built_rpms))
    return host


@pytest.fixture
def server(tmp_path: Path) -> Any:
    root = tmp_path / "www"
    root.mkdir()
    (root / "slurm-25.05.9.tar.gz").write_bytes(fake_tarball())
    s = Server(root)
    s.start()
    yield s
    s.stop()


def el_cluster(tmp_path: Path, server: Server, **build: Any) -> Cluster:
    """The build spec of test_slurm_build.py on Rocky 9, the fake tarball's digest pinned."""
    sha = hashlib.sha256((server.root / "slurm-25.05.9.tar.gz").read_bytes()).hexdigest()
    return cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", sha, "rocky9", **build)


def test_plan_shows_the_rpm_build_before_it_is_made(tmp_path: Path, server: Server) -> None:
    c = el_cluster(tmp_path, server)
    [inputs] = rb.build_inputs(c.spec).values()
    assert (inputs.platform, inputs.format, inputs.crb) == ("rocky9-x86_64", PackageFormat.RPM, ROCKY_CRB)
    assert sb.planned_builds(c) == [
        f"Slurm {VERSION} for rocky9-x86_64: not cached: apply builds it on ctl1 first (never built here)"
    ]


def test_the_rpm_build_runs_rpmbuild_ta_with_the_options_and_keeps_a_signed_rpm_md_repository(
    el_host: Path, server: Server, tmp_path: Path
) -> None:
    c = el_cluster(tmp_path, server)
    [built] = sb.ensure_builds(c, lambda _m: None)
    calls = el_host.read_text().splitlines()
    crb = ["dnf " + " ".join(f"[{a}]" for a in shlex.split(cmd)[1:]) for cmd in ROCKY_CRB.split(" && ")]
    assert crb == ["dnf [-y] [install] [dnf-plugins-core]", "dnf [config-manager] [--set-enabled] [crb]"]
    assert calls[: len(crb)] == crb
    tools = " ".join(f"[{t}]" for t in spec_rpm.BUILD_TOOLS + spec_rpm.EXTRA_BUILD_DEPENDS)
    assert calls[len(crb)] == f"dnf [-y] [-q] [install] {tools}"
    # what the real rpmspec read in the tarball's slurm.spec with the options, one argument each
    assert calls[len(crb) + 1] == "dnf [-y] [-q] [install] [libjwt-devel >= 1.10.0] [munge-devel] [pmix]"
    opts = " ".join(f"[{a}]" for a in spec_rpm.rpmbuild_options(False))
    work = tmp_path / "work" / built.inputs.key
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    assert calls[len(crb) + 2] == (
        f"rpmbuild [-ta] {opts} [--define] [_topdir {work}/rpmbuild] [--define] [_smp_mflags -j{nproc}] "
        "[slurm-25.05.9.tar.bz2]"
    )
    assert len(calls) == len(crb) + 3
    repo = built.folder / rb.REPO_FOLDER
    assert sorted(p.name for p in repo.glob("*.rpm")) == sorted(
        f"{n}-{VERSION}.x86_64.rpm" for n in (*rb.REQUIRED_RPMS, "slurm-libpmi")
    )
    assert repomd_problem(built.folder, rb.REPO_FOLDER, (built.folder / rb.PUBLIC_KEY_FILE).read_bytes()) is None
    assert (built.folder / "key.asc").read_bytes().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----")
    [again] = sb.ensure_builds(c, lambda _m: None)
    assert again.cached and el_host.read_text().splitlines() == calls


def test_the_nvml_option_needs_nvml_h_on_the_build_host(el_host: Path, server: Server, tmp_path: Path) -> None:
    c = el_cluster(tmp_path, server, nvml=True)
    [inputs] = rb.build_inputs(c.spec).values()
    script = rb.build_script(inputs)
    assert "--with nvml" in script and "/usr/local/cuda/include/nvml.h" in script
    if not any(Path(p).is_file() for p in spec_rpm.NVML_HEADERS):  # this machine has no CUDA headers
        with pytest.raises(sb.SlurmBuildError) as e:
            sb.ensure_builds(c, lambda _m: None)
        assert "failed (exit 4)" in str(e.value) and "rpmbuild --with nvml needs NVIDIA's nvml.h" in str(e.value)
        assert "rpmbuild [-ta]" not in el_host.read_text()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("FAIL_DEPS", "Error: Unable to find a match: libjwt-devel"),
        ("Version:\t25.05.9", "slurm.spec is not at 25.05.9-1: 25.05.8-1"),
    ],
)
def test_a_failed_rpm_build_says_why_and_leaves_no_build(
    el_host: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, says: str
) -> None:
    if change == "FAIL_DEPS":
        monkeypatch.setenv("FAIL_DEPS", "1")
    else:
        (server.root / "slurm-25.05.9.tar.gz").write_bytes(fake_tarball(SPEC.replace(change, "Version:\t25.05.8")))
    c = el_cluster(tmp_path, server)
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    assert says in str(e.value) and "no node was converged" in str(e.value)
    assert "rpmbuild [-ta]" not in el_host.read_text()
    assert [p.name for p in (tmp_path / "state" / rb.BUILDS_FOLDER).iterdir()] == ["tarballs"]


def test_an_rpm_build_missing_a_package_is_not_kept(
    el_host: Path, server: Server, tmp_path: Path, built_rpms: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    for p in built_rpms.glob("*.rpm"):
        if not p.name.startswith("slurm-slurmdbd-"):
            (fewer / p.name).write_bytes(p.read_bytes())
    monkeypatch.setenv("STUB_RPMS", str(fewer))
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(el_cluster(tmp_path, server), lambda _m: None)
    assert str(e.value) == f"the build did not make these packages at {VERSION}: slurm-slurmdbd (missing)"


def test_a_node_gets_the_repository_and_the_real_dnf_installs_slurmd_at_versions_slurm(
    el_host: Path,
    server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dnf_root: Path,  # noqa: F811
) -> None:
    """The layer's files for a Rocky 9 node, the same bytes ``slurm-upgrade`` publishes; dnf reads the
    repository through the ``.repo`` file (repomd.xml.asc checked with the build's key) and installs the
    pinned ``slurm-slurmd`` as gpuforge asks for it; a changed index is refused."""
    node_root = tmp_path / "node"
    monkeypatch.setattr(rb, "REPO_ON_NODE", str(node_root / "var/lib/gpuforge/slurm-build"))
    monkeypatch.setattr(rbr, "KEY", str(node_root / "etc/pki/rpm-gpg/gpuforge-slurm.asc"))
    monkeypatch.setattr(rbr, "REPO_FILE", str(dnf_root / "yum.repos.d/gpuforge-slurm.repo"))
    c = el_cluster(tmp_path, server)
    [built] = sb.ensure_builds(c, lambda _m: None)
    key = built.inputs.key
    node = next(n for n in resolve_nodes(c.spec) if n.name == "cpu1")
    layer = slurm_repo_layer(c.spec, node, tmp_path / "state")
    on_node = f"{rb.REPO_ON_NODE}/{key}"
    assert [f.path for f in layer.early_files][-5:-3] == [rbr.KEY, rbr.REPO_FILE]
    assert f"{on_node}/repodata/repomd.xml.asc" in {f.path for f in layer.early_files}
    assert layer.early_files[-4].content == (
        f"# gpuforge: SchedMD's Slurm {VERSION} built from its release tarball (slurm.source: build)\n"
        f"[gpuforge-slurm]\nname=SchedMD's Slurm {VERSION} (gpuforge build {key})\nbaseurl=file://{on_node}\n"
        f"enabled=1\nrepo_gpgcheck=1\ngpgcheck=0\ngpgkey=file://{rbr.KEY}\n"
    )
    [refresh] = layer.after(None, {rbr.REPO_FILE})  # type: ignore[arg-type, misc]
    assert refresh.command == RPM.refresh
    assert sb.publish(c, ["cpu1"]) == {}
    for f in layer.early_files:
        if "/systemd/" not in f.path:
            assert Path(f.path).read_bytes() == f.data, f.path
    pinned = RPM.pin(slurm_package(c.spec, "slurmd", deb=False))
    assert pinned == f"slurm-slurmd-{VERSION}"
    repos = dnf_root / "yum.repos.d"
    conf = dnf_root / "dnf.conf"
    conf.write_text(f"[main]\nreposdir={repos}\ncachedir={dnf_root / 'cache'}\n")
    real_dnf = shutil.which("dnf", path="/usr/bin:/bin")  # the stub build host's dnf is first on PATH
    assert real_dnf is not None
    base = [
        real_dnf, "-y", "-c", str(conf), f"--installroot={dnf_root / 'sysroot'}", "--releasever=9",
        f"--setopt=reposdir={repos}", "--setopt=module_platform_id=platform:el9",
    ]  # fmt: skip
    done = subprocess.run(
        [*base, "install", pinned], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rpm_q = ["rpm", "--root", str(dnf_root / "sysroot")]
    assert subprocess.run([*rpm_q, "-qa"], capture_output=True, text=True).stdout.split() == [
        f"slurm-slurmd-{VERSION}.x86_64"
    ], done.stdout + done.stderr
    repomd = Path(on_node) / "repodata/repomd.xml"
    repomd.write_bytes(repomd.read_bytes().replace(b"<revision>", b"<revision>1"))
    changed = subprocess.run(
        [*base, "--refresh", "install", f"slurm-{VERSION}"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert changed.returncode != 0 and "repomd.xml GPG signature verification error" in changed.stderr, changed.stderr
    assert subprocess.run([*rpm_q, "-q", "slurm"], capture_output=True).returncode != 0, "nothing from a changed index"
