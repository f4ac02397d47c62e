"""``slurm.source: build`` on the control host (``gpuforge/orchestrate/slurm_build.py``), run for real:
the tarball fetched from a loopback HTTP server, the real upload, build and download commands run by
bash (the build host is this machine's shell, with stub ``apt-get``, ``dpkg-buildpackage`` and
``dpkg-scanpackages`` whose answers each test sets), the repository signed with gpg.

The lab test (``tests/slurm/test_slurm_build_lab.py``) builds SchedMD's 24.11.5 for real on a lab node.
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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.signing import inrelease_problem
from gpuforge.deploy.converge import StepKind
from gpuforge.deploy.layers.slurm_repo import slurm_repo_layer
from gpuforge.orchestrate import slurm_build as sb
from gpuforge.render import slurm_build as rb
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster
from tests import yaml_text
from tests.bundle.conftest import Server

VERSION = "25.05.9-1"  # not in gpuforge's table: the spec pins the fake tarball's digest
TOP = "slurm-slurm-25-05-9-1"

STUB_APT = """#!/bin/sh
echo "apt-get $*" >> "$STUB_LOG"
case "$*" in
  *build-dep*) [ -n "${FAIL_DEPS:-}" ] && { echo "E: Unable to locate package libjwt-dev" >&2; exit 100; } ;;
esac
exit 0
"""
STUB_BUILD = """#!/bin/sh
echo "dpkg-buildpackage $* DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS" >> "$STUB_LOG"
[ -n "${FAIL_COMPILE:-}" ] && printf '\\033]0;owned\\007'
[ -n "${FAIL_COMPILE:-}" ] && { echo "../../src/slurmctld/agent.c:42:1: error: expected ';'"; exit 2; }
for p in slurm-smd slurm-smd-client slurm-smd-dev slurm-smd-slurmctld slurm-smd-slurmd slurm-smd-slurmdbd; do
  printf 'not really a deb: %s\\n' "$p" > "../${p}_${STUB_VERSION}_amd64.deb"
done
"""
STUB_SCAN = """#!/bin/sh
for f in *.deb; do
  p=${f%%_*}
  printf 'Package: %s\\nVersion: %s\\nArchitecture: amd64\\nFilename: ./%s\\nSize: %s\\nSHA256: %s\\n\\n' \
    "$p" "$STUB_VERSION" "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
done
"""


def fake_tarball(top: str = TOP, version: str = VERSION) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in (
            (f"{top}/debian/control", "Source: slurm-smd\nBuild-Depends: libjwt-dev\n"),
            (f"{top}/debian/changelog", f"slurm-smd ({version}) UNRELEASED; urgency=medium\n"),
            (f"{top}/configure.ac", "AC_INIT\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's bash as the build host: stubs first on PATH, the work folder under tmp_path."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, text in (("apt-get", STUB_APT), ("dpkg-buildpackage", STUB_BUILD), ("dpkg-scanpackages", STUB_SCAN)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(stat.S_IRWXU)
    log = tmp_path / "stub.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")
    monkeypatch.setenv("STUB_LOG", str(log))
    monkeypatch.setenv("STUB_VERSION", VERSION)
    monkeypatch.setattr(rb, "WORK_ON_HOST", str(tmp_path / "work"))
    (tmp_path / "proc").mkdir()  # the build host's processes: none of Slurm's (a test adds some)
    monkeypatch.setattr(rb, "PROC", str(tmp_path / "proc"))
    monkeypatch.setattr(sb, "ssh_argv", lambda cluster, node, command, options=(): ["bash", "-c", command])
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return log


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "slurm-25.05.9.tar.gz").write_bytes(fake_tarball())
    s = Server(root)
    s.start()
    yield s
    s.stop()


def cluster_of(tmp_path: Path, url: str, sha256: str, os: str = "debian12", **build: Any) -> Cluster:
    doc = {
        "cluster": {"name": "t", "scheduler": "slurm", "os": os},
        "versions": {"slurm": VERSION},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller"]},
            {
                "name": "cpu", "hosts": "cpu[1-2]", "roles": ["compute"],
                "hardware": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000},
            },
        ],
        "slurm": {
            "source": "build",
            "build": {"tarball": url, "sha256": sha256, "hosts": ["ctl1"], **build},
            "accounting": {"enabled": False},
            "partitions": [{"name": "b", "nodes": "cpu"}],
        },
    }  # fmt: skip
    path = tmp_path / "spec.yaml"
    path.write_text(yaml_text.dump(doc))
    return Cluster.of(parse_spec(path.read_text()), path)


def digest(server: Server) -> str:
    return hashlib.sha256((server.root / "slurm-25.05.9.tar.gz").read_bytes()).hexdigest()


def test_a_build_is_made_signed_and_kept_then_taken_from_the_cache(host: Path, server: Server, tmp_path: Path) -> None:
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    said: list[str] = []
    [first] = sb.ensure_builds(c, said.append)
    assert not first.cached and first.inputs.platform == "debian12-x86_64" and first.inputs.host == "ctl1"
    repo = first.folder / rb.REPO_FOLDER
    debs = sorted(p.name for p in repo.glob("*.deb"))
    assert debs == sorted(f"{p}_{VERSION}_amd64.deb" for p in rb.REQUIRED_PACKAGES)
    assert inrelease_problem(first.folder, rb.REPO_FOLDER, (first.folder / rb.PUBLIC_KEY_FILE).read_bytes()) is None
    record = json.loads((first.folder / rb.RECORD_FILE).read_text())
    assert record["version"] == VERSION and record["sha256"] == digest(server) and record["host"] == "ctl1"
    calls = host.read_text().splitlines()
    assert calls[0] == "apt-get update -q"
    assert calls[1] == "apt-get install -y -q --no-install-recommends build-essential dpkg-dev fakeroot"
    assert calls[2] == "apt-get build-dep -y -q --no-install-recommends ./src"
    assert calls[3].startswith("dpkg-buildpackage -b -uc -us DEB_BUILD_OPTIONS=nocheck noautodbgsym parallel=")
    assert not (tmp_path / "work" / first.inputs.key).exists(), "the build host's work folder is removed"
    assert said[-1].startswith(f"Slurm {VERSION} for debian12-x86_64: built on ctl1 in ")

    [again] = sb.ensure_builds(c, said.append)
    assert again.cached and again.folder == first.folder
    assert host.read_text().splitlines() == calls, "the cache is taken: nothing runs on the build host"
    assert said[-1] == f"Slurm {VERSION} for debian12-x86_64: cached ({first.inputs.key})"
    assert server.requests == ["/slurm-25.05.9.tar.gz"], "the verified tarball is kept too"
    assert sb.planned_builds(c)[0].startswith(f"Slurm {VERSION} for debian12-x86_64: cached ({first.inputs.key}")


def test_another_option_is_another_build_and_plan_says_how_long_the_last_one_took(
    host: Path, server: Server, tmp_path: Path
) -> None:
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    [plain] = sb.ensure_builds(c, lambda _m: None)
    nvml = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server), nvml=True)
    [line] = sb.planned_builds(nvml)
    assert line.startswith(f"Slurm {VERSION} for debian12-x86_64: not cached: apply builds it on ctl1 first (")
    assert "the last build of it here took" in line
    [built] = sb.ensure_builds(nvml, lambda _m: None)
    assert built.folder != plain.folder and not built.cached
    assert "apt-get install -y -q --no-install-recommends build-essential dpkg-dev fakeroot libnvidia-ml-dev" in (
        host.read_text()
    )


def test_a_corrupted_tarball_is_refused_before_anything_runs_on_the_build_host(
    host: Path, server: Server, tmp_path: Path
) -> None:
    good = digest(server)
    data = bytearray((server.root / "slurm-25.05.9.tar.gz").read_bytes())
    data[100] ^= 0xFF
    (server.root / "slurm-25.05.9.tar.gz").write_bytes(bytes(data))
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", good)
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    assert f"does not match the published {good}" in str(e.value)
    assert "nothing was built and no node was touched" in str(e.value)
    assert host.read_text() == "", "nothing ran on the build host"
    assert [p.name for p in (tmp_path / "state" / rb.BUILDS_FOLDER).iterdir()] == ["tarballs"]
    assert not any((tmp_path / "state" / rb.BUILDS_FOLDER / "tarballs").glob("*.tar.gz"))


@pytest.mark.parametrize(
    ("env", "exit_code", "says"),
    [
        ("FAIL_DEPS", 4, "E: Unable to locate package libjwt-dev"),
        ("FAIL_COMPILE", 5, "agent.c:42:1: error: expected ';'"),
    ],
)
def test_a_failed_build_names_the_cause_and_leaves_no_build(
    host: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str, exit_code: int, says: str
) -> None:
    monkeypatch.setenv(env, "1")
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    assert f"ctl1: build of Slurm {VERSION} failed (exit {exit_code}); no node was converged" in str(e.value)
    assert says in str(e.value)
    assert "\x1b" not in str(e.value) and "\x07" not in str(e.value), "the node's escape sequences are not passed on"
    if env == "FAIL_COMPILE":
        assert "\\x1b]0;owned\\x07" in str(e.value), "the stub did print one, shown as text"
    left = sorted(p.name for p in (tmp_path / "state" / rb.BUILDS_FOLDER).iterdir())
    assert left == ["tarballs"], "no build folder, complete or partial"


def test_a_tarball_of_another_version_is_refused_by_its_changelog(host: Path, server: Server, tmp_path: Path) -> None:
    (server.root / "slurm-25.05.9.tar.gz").write_bytes(fake_tarball(version="25.05.8-1"))
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    assert "debian/changelog is not at 25.05.9-1: slurm-smd (25.05.8-1) UNRELEASED" in str(e.value)
    assert "build-dep" not in host.read_text()


def test_a_build_missing_a_package_is_not_kept(
    host: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = Path(os.environ["PATH"].split(":")[0]) / "dpkg-buildpackage"
    stub.write_text(stub.read_text().replace(" slurm-smd-slurmdbd; do", "; do"))
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    assert str(e.value) == f"the build did not make these packages at {VERSION}: slurm-smd-slurmdbd (missing)"


def test_a_node_gets_the_complete_build_as_a_signed_flat_repository(host: Path, server: Server, tmp_path: Path) -> None:
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    node = next(n for n in resolve_nodes(c.spec) if n.name == "cpu1")
    before = slurm_repo_layer(c.spec, node, tmp_path / "state")
    assert before.early_files == []
    assert before.after is not None
    [step] = before.after(None, set())  # type: ignore[arg-type]
    assert step.kind is StepKind.BUILD and step.command is None and "apply builds it on ctl1" in step.summary
    [built] = sb.ensure_builds(c, lambda _m: None)
    layer = slurm_repo_layer(c.spec, node, tmp_path / "state")
    paths = [f.path for f in layer.early_files]
    key = built.inputs.key
    dropins = [f"/etc/systemd/system/{u}.service.d/gpuforge-wait-for-config.conf" for u in rb.WAIT_FOR_CONFIG]
    assert paths[-5:] == [rb.KEYRING, rb.SOURCES_FILE, *dropins]
    assert layer.early_files[-3].content == (
        "# gpuforge: SchedMD's slurmd starts only once gpuforge wrote its config\n[Unit]\n"
        "ConditionPathExists=|/etc/slurm/slurm.conf\n"
        "ConditionPathExists=|/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf\n"
    )
    assert layer.early_files[-2].content.endswith("[Unit]\nConditionPathExists=/etc/slurm/slurm.conf\n")
    assert sorted(paths[:-5]) == sorted(
        f"{rb.REPO_ON_NODE}/{key}/{p.name}" for p in (built.folder / rb.REPO_FOLDER).iterdir()
    )
    sources = layer.early_files[-4].content
    assert sources == (
        f"# gpuforge: SchedMD's Slurm {VERSION} built from its release tarball (slurm.source: build)\n"
        f"Types: deb\nURIs: file:{rb.REPO_ON_NODE}/{key}\nSuites: ./\nSigned-By: {rb.KEYRING}\n"
    )
    [refresh] = layer.after(None, {rb.SOURCES_FILE})  # type: ignore[arg-type, misc]
    assert refresh.kind is StepKind.APT_UPDATE and refresh.command is not None
    assert layer.after(None, set()) == []  # type: ignore[misc]


def test_the_build_commands_quote_every_value() -> None:
    inputs = rb.BuildInputs("debian12-x86_64", "24.11.5-1", "a" * 64, False, "n1", "x.tar.gz", "top;rm -rf /")
    script = rb.build_script(inputs)
    assert shlex.quote("top;rm -rf /") in script
    keys = {rb.BuildInputs("debian12-x86_64", "24.11.5-1", "a" * 64, nvml, h, "x", None).key
            for nvml in (False, True) for h in ("n1", "n2")}  # fmt: skip
    assert len(keys) == 2, "the key is the build's inputs, not the host that builds them"


def test_a_build_host_that_runs_job_steps_is_refused_before_anything_is_sent(
    host: Path, server: Server, tmp_path: Path
) -> None:
    """The compile takes every core: a build host with a slurmstepd (a job step) running is refused,
    naming the steps and the way out; nothing is sent, built or kept. Once the steps end, the build runs."""
    step = tmp_path / "proc" / "4242"
    step.mkdir()
    (step / "comm").write_text("slurmstepd\n")
    (step / "cmdline").write_bytes(b"slurmstepd: [1234.batch]\0\0")
    other = tmp_path / "proc" / "17"
    other.mkdir()
    (other / "comm").write_text("sshd\n")
    (other / "cmdline").write_bytes(b"sshd: root@pts/0\0")
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    with pytest.raises(sb.SlurmBuildError) as e:
        sb.ensure_builds(c, lambda _m: None)
    says = str(e.value)
    assert "ctl1, the build host of Slurm 25.05.9-1 for debian12-x86_64, runs Slurm job steps" in says
    assert "slurmstepd: [1234.batch]" in says and "sshd" not in says
    assert "slurm.build.hosts" in says and "nothing was built and no node was converged" in says
    assert host.read_text() == "" and not (tmp_path / "work").exists(), "nothing reached the build host"
    assert not [p for p in (tmp_path / "state" / rb.BUILDS_FOLDER).iterdir() if p.name != "tarballs"]
    shutil.rmtree(step)
    [built] = sb.ensure_builds(c, lambda _m: None)
    assert not built.cached and (built.folder / rb.RECORD_FILE).is_file()


def test_a_real_slurmstepd_process_on_the_build_host_is_seen(
    host: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check against this machine's /proc, with a process whose name and title are a job step's."""
    exe = tmp_path / "bin" / "slurmstepd"
    exe.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    proc = subprocess.Popen(["bash", "-c", f"exec -a 'slurmstepd: [77.0]' {shlex.quote(str(exe))} 60"])
    monkeypatch.setattr(rb, "PROC", "/proc")
    try:
        comm = Path(f"/proc/{proc.pid}/comm")
        for _ in range(500):  # until bash has exec'd the job step's stand-in
            if comm.read_text().strip() == "slurmstepd":
                break
            time.sleep(0.01)
        c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
        with pytest.raises(sb.SlurmBuildError) as e:
            sb.ensure_builds(c, lambda _m: None)
    finally:
        proc.kill()
        proc.wait()
    assert "slurmstepd: [77.0] 60" in str(e.value)
    assert host.read_text() == ""


def test_slurm_upgrade_publishes_a_build_as_the_layer_would_and_the_real_apt_reads_it(
    host: Path, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``slurm-upgrade``'s publish (``sb.publish``): the build lands in the node's apt sources with the
    bytes the ``slurm-repo`` layer would write (the next apply changes nothing), the real apt-get
    verifies its InRelease with the build's key and offers its version; a stream cut short leaves the
    node's sources as they were."""
    from tests.bundle.test_k8s_repo_apt import private_apt

    apt_root = tmp_path / "apt"
    env = private_apt(apt_root, tmp_path / "unused")
    node_root = tmp_path / "node"
    monkeypatch.setattr(rb, "REPO_ON_NODE", str(node_root / "var/lib/gpuforge/slurm-build"))
    monkeypatch.setattr(rb, "KEYRING", str(node_root / "etc/apt/keyrings/gpuforge-slurm.gpg"))
    monkeypatch.setattr(rb, "SOURCES_FILE", str(apt_root / "etc/sources.list.d/gpuforge-slurm.sources"))
    c = cluster_of(tmp_path, f"{server.url}/slurm-25.05.9.tar.gz", digest(server))
    assert "cpu1" in sb.publish(c, ["cpu1"])  # nothing built yet: nothing sent
    assert not Path(rb.SOURCES_FILE).exists()
    [built] = sb.ensure_builds(c, lambda _m: None)
    assert sb.publish(c, ["cpu1", "cpu2"]) == {}
    node = next(n for n in resolve_nodes(c.spec) if n.name == "cpu1")
    layer = slurm_repo_layer(c.spec, node, tmp_path / "state")
    for f in layer.early_files:
        if "/systemd/" in f.path:
            continue  # the drop-ins come with the first apply, not with an upgrade
        assert Path(f.path).read_bytes() == f.data, f.path
        assert oct(Path(f.path).stat().st_mode & 0o777) == "0o644", f.path
    apt = shutil.which("apt-get", path="/usr/bin:/bin")
    assert apt is not None
    done = subprocess.run([apt, "-q", "update"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "NO_PUBKEY" not in done.stderr, done.stdout + done.stderr
    policy = subprocess.run(["apt-cache", "policy", "slurm-smd-slurmd"], capture_output=True, text=True, env=env)
    assert f"Candidate: {VERSION}" in policy.stdout, policy.stdout
    before = {p: p.read_bytes() for p in node_root.rglob("*") if p.is_file()}
    cut = sb.publish_tar(c, built.inputs)[:2048]
    monkeypatch.setattr(sb, "publish_tar", lambda _c, _i: cut)
    failures = sb.publish(c, ["cpu1"])
    assert "publishing gpuforge's Slurm build failed (exit " in failures["cpu1"], failures
    assert {p: p.read_bytes() for p in node_root.rglob("*") if p.is_file()} == before
    assert not [p for p in Path(rb.REPO_ON_NODE).iterdir() if p.name.startswith(".")], "no leftovers"
