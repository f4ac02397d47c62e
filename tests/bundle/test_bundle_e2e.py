"""``gpuforge bundle`` end to end against flat repositories served on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.debian import PackageIndex, parse_packages
from gpuforge.bundle.signing import BUNDLE_KEY, release_sums, release_text, verify_inrelease, verify_pinned
from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import nvidia_sources as src
from tests.bundle.conftest import (
    ARTIFACTS,
    RepoKey,
    Server,
    build_deb,
    cli_env,
    index_repo,
    mirror_spec,
    run_bundle,
)
from tests.helpers import RENDER_ONLY_BUNDLE_FINGERPRINT

CONTAINER = "apt/nvidia-container"
CUDA = "apt/nvidia-cuda"
PINNED = {
    CONTAINER: {
        "nvidia-container-toolkit": "1.20.0-1",
        "nvidia-container-toolkit-base": "1.20.0-1",
        "libnvidia-container-tools": "1.20.0-1",
        "libnvidia-container1": "1.20.0-1",
    },
    CUDA: {
        "nvidia-dkms-550-open": "550.163.01-0ubuntu1",  # the version carrier
        "nvidia-kernel-open-550": "550.163.01-0ubuntu1",  # the open flavor below 560, not its newer 550.170.01
        "cuda-drivers-550": "550.163.01-1",  # with it (issue 32 item 4: no nvidia-open before 560)
        "nvidia-driver-550-open": "550.163.01-0ubuntu1",  # dependency (=)
        "nvidia-kernel-common-550": "550.163.01-0ubuntu1",  # dependency (=)
        "nvidia-utils-550": "550.163.01-0ubuntu1",  # dependency (=)
        "libnvidia-compute-550": "550.163.01-0ubuntu1",  # dependency (=), provides libnvidia-ml1
        "datacenter-gpu-manager-4-core": "1:4.2.3-1",  # epoch, not the newer 1:4.3.0-1
        "datacenter-gpu-manager-exporter": "4.1.3-1",  # dcgm-exporter 4.2.3-4.1.3: its exporter half
        "datacenter-gpu-manager-4-proprietary": "1:4.2.3-1",
        "datacenter-gpu-manager-4-cuda12": "1:4.2.3-1",  # the driver's CUDA major (550: CUDA 12)
        "datacenter-gpu-manager-4-proprietary-cuda12": "1:4.2.3-1",
    },
}
EXTERNAL = {
    CONTAINER: {
        "libc6 (>= 2.34)": ["libnvidia-container-tools", "libnvidia-container1"],
        "libseccomp2 | libcap2": ["libnvidia-container1"],
    },
    CUDA: {
        "dkms": ["nvidia-dkms-550-open"],  # from Ubuntu's archive
        "libc6 (>= 2.34)": ["datacenter-gpu-manager-4-core", "nvidia-utils-550"],
    },
}


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


#: How the manifest says where a release file's sha256 was known from, for the spec's pins.
PINNED_IN_SPEC = "pinned in the spec (sources.artifact_sha256)"


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


def all_files(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): sha256(p) for p in sorted(out.rglob("*")) if p.is_file()}


def no_leftovers(out: Path) -> None:
    """Nothing half-written: no partial downloads, no temp files."""
    assert not (out / ".partial").exists()
    leftovers = [p.name for p in out.rglob("*") if p.name.endswith((".part", ".tmp"))]
    assert leftovers == []


def write_spec(tmp_path: Path, base: str, key: str, name: str = "cluster.yaml") -> Path:
    """The test cluster's mirror-mode spec on ``base``, its repositories signed by ``key``."""
    path = tmp_path / name
    path.write_text(mirror_spec(base, key))
    return path


SIGNED_META = ("/Packages", "/InRelease", "/Release", "/gpgkey", "/3bf863cc.pub")


def fetched(server: Server) -> list[str]:
    """Package and artifact files the server sent (indexes, Release files and keys excluded)."""
    return [p for p in server.requests if not any(m in p for m in SIGNED_META)]


def check_complete_bundle(out: Path, spec_file: Path, upstream_key: str) -> None:
    m = manifest(out)
    assert m["format"] == "gpuforge-bundle/4"
    assert m["spec"] == {"name": "offl", "file": spec_file.name, "sha256": sha256(spec_file)}
    assert m["complete"] is True and m["missing"] == [] and "unsupported" not in m
    assert m["fetched_from"] == "mirror"
    assert m["created"].endswith("Z")
    # Layout: exactly the manifest's files plus the manifest itself and its signature by the bundle key.
    listed = {f["path"]: f for f in m["files"]}
    assert set(all_files(out)) == {*listed, "manifest.json", "manifest.json.asc"}
    assert m["signing"]["manifest_signature"] == "manifest.json.asc"
    verify_pinned(
        (out / "manifest.json").read_bytes(),
        (out / "manifest.json.asc").read_bytes(),
        (out / BUNDLE_KEY).read_bytes(),
        m["signing"]["fingerprint"],
    )
    for rel, entry in listed.items():
        assert entry["sha256"] == sha256(out / rel), rel
        assert entry["size"] == (out / rel).stat().st_size, rel
    assert {f"artifacts/{n}" for n in ARTIFACTS} <= set(listed)
    for name, data in ARTIFACTS.items():
        assert (out / "artifacts" / name).read_bytes() == data
        assert listed[f"artifacts/{name}"]["source"].endswith(f"/artifacts/{name}")
        assert listed[f"artifacts/{name}"]["checksum"] == f"sha256 known beforehand: {PINNED_IN_SPEC}"
    repos = {r["path"]: r for r in m["repositories"]}
    assert set(repos) == {CONTAINER, CUDA}
    for path, pinned in PINNED.items():
        # The regenerated index: one stanza per bundled .deb, at the pinned versions only.
        stanzas = parse_packages((out / path / "Packages").read_text())
        assert {s.package: s.version for s in stanzas} == pinned
        assert len(stanzas) == len(pinned)
        debs = sorted(p.name for p in (out / path).glob("*.deb"))
        assert debs == sorted(s.filename.removeprefix("./") for s in stanzas)
        for s in stanzas:
            deb = out / path / s.filename
            assert s.filename == f"./{deb.name}"  # relative, flat
            assert s.get("Size") == str(deb.stat().st_size)
            assert s.get("SHA256") == sha256(deb)
            assert s.get("MD5sum") == hashlib.md5(deb.read_bytes()).hexdigest()
            assert s.arch == "amd64" and s.get("Description")
            control = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True, text=True)
            assert control.stdout.split() == ["Package:", s.package, "Version:", s.version]
            assert listed[f"{path}/{deb.name}"]["checksum"] == "index"
        assert listed[f"{path}/Packages"]["source"].startswith("generated from http://127.0.0.1:")
        assert {p["package"]: p["version"] for p in repos[path]["packages"]} == pinned
        assert {e["dependency"]: e["required_by"] for e in repos[path]["external"]} == EXTERNAL[path]
        assert PackageIndex(stanzas).by_name.keys() == pinned.keys()
        # Upstream's index was read only once its InRelease verified with the repository's key.
        assert [x["signed_by"] for x in repos[path]["sources"]] == [upstream_key]
        # The bundle's repository is signed by the bundle key, over exactly its Packages.
        signed = verify_inrelease((out / path / "InRelease").read_bytes(), (out / BUNDLE_KEY).read_bytes())
        assert signed.fingerprint == m["signing"]["fingerprint"] != upstream_key
        packages = out / path / "Packages"
        assert release_sums(signed.text) == {"Packages": (sha256(packages), packages.stat().st_size)}
    assert m["signing"]["key"] == BUNDLE_KEY and sorted(m["signing"]["repositories"]) == sorted(PINNED)
    assert b"PRIVATE KEY" not in b"".join((out / rel).read_bytes() for rel in listed)
    no_leftovers(out)


def printed_fingerprint(cp: subprocess.CompletedProcess[str]) -> str:
    """The bundle key fingerprint ``gpuforge bundle`` told the operator to pin."""
    line = next(x for x in cp.stdout.splitlines() if "pin it: sources.bundle_fingerprint: " in x)
    return line.rsplit(" ", 1)[1]


def test_bundle_mirror_end_to_end(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path, served.url, repo_key.fingerprint)
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "complete" in cp.stdout and "INCOMPLETE" not in cp.stdout
    check_complete_bundle(out, spec_file, repo_key.fingerprint)
    pin = printed_fingerprint(cp)
    assert pin == manifest(out)["signing"]["fingerprint"]
    # Only what is needed was fetched: no older or newer version, no unrelated package.
    got = fetched(served)
    assert len(got) == len(PINNED[CONTAINER]) + len(PINNED[CUDA]) + len(ARTIFACTS)
    assert not any(v in p for p in got for v in ("1.17.7", "1.21.0", "4.3.0", "550.144", "550.170", "docker"))
    assert verify_bundle(out, pin) == []
    cp = run_bundle("--verify", str(out), "--fingerprint", pin)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"OK (signed by {pin})" in cp.stdout

    # A re-run with the key pinned re-reads the indexes, downloads nothing and rewrites nothing.
    before = all_files(out)
    served.requests.clear()
    cp = run_bundle(str(spec_file), "-o", str(out), "--fingerprint", pin)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "0 downloaded, 19 reused" in cp.stdout
    assert fetched(served) == []
    assert all_files(out) == before and printed_fingerprint(cp) == pin

    # The mirror goes away: exit 1, each unreachable index recorded, the packages left as they were;
    # the manifest changed, so a new key signs it (the pinned one's secret half is gone).
    served.stop()
    cp = run_bundle(str(spec_file), "-o", str(out), "--fingerprint", pin)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "INCOMPLETE" in cp.stdout
    assert f"the bundle key changed: sources.bundle_fingerprint is {pin}" in cp.stderr
    m = manifest(out)
    assert m["complete"] is False and m["signing"]["fingerprint"] == printed_fingerprint(cp) != pin
    assert [(x["what"], x["url"]) for x in m["missing"]] == [  # the repository key is fetched first
        (f"{CONTAINER}: Packages index", f"{served.url}/container/gpgkey"),
        (f"{CUDA}: Packages index", f"{served.url}/cuda/3bf863cc.pub"),
    ]
    assert all("unreachable" in x["error"] and "refused" in x["error"].lower() for x in m["missing"])
    assert "missing apt/nvidia-cuda: Packages index" in cp.stderr
    assert unsigned(all_files(out)) == unsigned(before)
    assert {r["path"]: len(r["packages"]) for r in m["repositories"]} == {CONTAINER: 4, CUDA: 12}
    assert all(f["sha256"] == all_files(out)[f["path"]] for f in m["files"])
    no_leftovers(out)
    assert verify_bundle(out, pin)[0].startswith("manifest.json.asc: the manifest is not signed by the pinned")
    problems = verify_bundle(out, m["signing"]["fingerprint"])
    assert problems == ["the manifest records an incomplete bundle (2 missing)"]

    # Back on another port (a new spec file): complete again, every file reused.
    again = Server(served.root)
    again.start()
    try:
        spec2 = write_spec(tmp_path, again.url, repo_key.fingerprint, "cluster2.yaml")
        cp = run_bundle(str(spec2), "-o", str(out))
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert fetched(again) == []
    finally:
        again.stop()
    check_complete_bundle(out, spec2, repo_key.fingerprint)
    pin = printed_fingerprint(cp)

    # --verify notices a changed file, and a stray file in a pushed repository.
    deb = next((out / CONTAINER).glob("nvidia-container-toolkit_*.deb"))
    deb.write_bytes(deb.read_bytes() + b"tampered")
    (out / CUDA / "extra.deb").write_bytes(b"not listed")
    cp = run_bundle("--verify", str(out), "--fingerprint", pin)
    assert cp.returncode == 1
    assert f"{CONTAINER}/{deb.name}: " in cp.stderr
    assert f"{CUDA}/extra.deb: not in the manifest" in cp.stderr
    assert "2 problem(s)" in cp.stdout


def unsigned(files: dict[str, str]) -> dict[str, str]:
    """The bundle's files but its key and signatures (a new build key rewrites those)."""
    signed = ("manifest.json", "manifest.json.asc", BUNDLE_KEY)
    return {k: v for k, v in files.items() if k not in signed and not k.endswith("/InRelease")}


def test_unreachable_mirror_on_a_fresh_directory(tmp_path: Path) -> None:
    dead = Server(tmp_path)
    dead.start()
    dead.stop()  # a port nothing listens on any more
    spec_file = write_spec(tmp_path, dead.url, RENDER_ONLY_BUNDLE_FINGERPRINT)
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    m = manifest(out)
    assert m["complete"] is False and [f["path"] for f in m["files"]] == [BUNDLE_KEY]
    missing = {x["what"]: x for x in m["missing"]}
    assert set(missing) == {
        f"{CONTAINER}: Packages index",
        f"{CUDA}: Packages index",
        *(f"artifacts/{n}" for n in ARTIFACTS),
    }
    for x in missing.values():
        assert x["url"].startswith(dead.url) and "unreachable" in x["error"]
    assert missing["artifacts/pyxis-0.24.0.tar.gz"]["url"] == f"{dead.url}/artifacts/pyxis-0.24.0.tar.gz"
    # Nothing was fetched, and still the manifest is signed: the key and the signature, nothing else.
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "apt",
        BUNDLE_KEY,
        "manifest.json",
        "manifest.json.asc",
    ]
    assert "INCOMPLETE" in cp.stdout
    cp = run_bundle("--verify", str(out), "--fingerprint", printed_fingerprint(cp))
    assert cp.returncode == 1 and "the manifest records an incomplete bundle" in cp.stderr


def test_bad_checksum_and_missing_file_are_recorded(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    pool = served.root / "container" / "pool"
    bad = pool / "libnvidia-container1_1.20.0-1_amd64.deb"
    bad.write_bytes(bad.read_bytes()[:-1] + b"X")  # same size, another checksum than the index says
    (pool / "nvidia-container-toolkit-base_1.20.0-1_amd64.deb").unlink()
    (served.root / "artifacts" / "pyxis-0.24.0.tar.gz").unlink()
    spec_file = write_spec(tmp_path, served.url, repo_key.fingerprint)
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    m = manifest(out)
    missing = {x["what"]: x["error"] for x in m["missing"]}
    assert missing.keys() == {
        f"{CONTAINER}/libnvidia-container1_1.20.0-1_amd64.deb",
        f"{CONTAINER}/nvidia-container-toolkit-base_1.20.0-1_amd64.deb",
        "artifacts/pyxis-0.24.0.tar.gz",
    }
    assert "does not match the published" in missing[f"{CONTAINER}/libnvidia-container1_1.20.0-1_amd64.deb"]
    assert missing["artifacts/pyxis-0.24.0.tar.gz"] == "HTTP 404 File not found"
    # The rest is there; the index lists only what is in the directory.
    stanzas = parse_packages((out / CONTAINER / "Packages").read_text())
    assert sorted(s.package for s in stanzas) == ["libnvidia-container-tools", "nvidia-container-toolkit"]
    assert not (out / CONTAINER / bad.name).exists()
    assert (out / CUDA / "Packages").is_file()
    no_leftovers(out)


def test_changed_pin_replaces_stale_packages(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    spec_file = write_spec(tmp_path, served.url, repo_key.fingerprint)
    out = tmp_path / "bundle"
    assert run_bundle(str(spec_file), "-o", str(out)).returncode == 0
    first_key = manifest(out)["signing"]["fingerprint"]
    spec_file.write_text(spec_file.read_text().replace("container_toolkit: 1.20.0", "container_toolkit: 1.21.0"))
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "4 stale removed" in cp.stdout
    # The index changed: a new build key signs every repository again (the old one is gone for good).
    new_key = manifest(out)["signing"]["fingerprint"]
    assert new_key != first_key
    debs = sorted(p.name for p in (out / CONTAINER).glob("*.deb"))
    assert debs == [
        "libnvidia-container-tools_1.21.0-1_amd64.deb",
        "libnvidia-container1_1.21.0-1_amd64.deb",
        "nvidia-container-toolkit-base_1.21.0-1_amd64.deb",
        "nvidia-container-toolkit_1.21.0-1_amd64.deb",
    ]
    assert verify_bundle(out, new_key) == []


def private_apt(root: Path, sources: str) -> dict[str, str]:
    """An apt configuration of its own under ``root`` (sources, pins, state, cache): its environment."""
    for d in ("etc/preferences.d", "etc/sources.list.d", "state/lists/partial", "cache/archives/partial"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/sources.list").write_text(sources)
    (root / "etc/preferences.d/driver").write_text(src.driver_pin("550.163.01"))
    (root / "etc/preferences.d/dcgm").write_text(src.dcgm_pin("4.2.3"))
    os_packages = {"libc6": "2.39-0ubuntu8", "libseccomp2": "2.5.5-1ubuntu3", "dkms": "3.0.11-1ubuntu13"}
    (root / "state/status").write_text(
        "\n".join(
            f"Package: {p}\nStatus: install ok installed\nArchitecture: amd64\nVersion: {v}\n"
            f"Maintainer: os <os@example.org>\nDescription: from the OS archive\n"
            for p, v in os_packages.items()
        )
    )
    conf = root / "apt.conf"
    conf.write_text(
        f'Dir::Etc::SourceList "{root}/etc/sources.list";\n'
        f'Dir::Etc::SourceParts "{root}/etc/sources.list.d";\n'
        f'Dir::Etc::Preferences "{root}/etc/preferences";\n'
        f'Dir::Etc::PreferencesParts "{root}/etc/preferences.d";\n'
        f'Dir::State "{root}/state";\nDir::State::status "{root}/state/status";\n'
        f'Dir::Cache "{root}/cache";\nAPT::Architecture "amd64";\nAPT::Architectures {{ "amd64"; }};\n'
        'APT::Sandbox::User "root";\nDebug::NoLocking "true";\nAcquire::Languages "none";\n'
    )
    return {**cli_env(), "APT_CONFIG": str(conf)}


def apt_update(env: dict[str, str], fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``apt-get update``; ``fresh``: as on a node that has no lists yet (apt refetches no index
    whose InRelease it already has unchanged)."""
    if fresh:
        lists = Path(env["APT_CONFIG"]).parent / "state" / "lists"
        for p in lists.glob("*"):
            if p.is_file():
                p.unlink()
    return subprocess.run(["apt-get", "-q", "update"], capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")
def test_apt_installs_from_the_bundle(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """apt reads the regenerated indexes through the deploy's own source lines and pins, checks
    the bundle's signature with the bundle key, resolves the pinned packages with the OS's libc6
    and checks every .deb's checksum."""
    spec_file = write_spec(tmp_path, served.url, repo_key.fingerprint)
    out = tmp_path / "bundle"
    assert run_bundle(str(spec_file), "-o", str(out)).returncode == 0
    lines = [
        src.apt_list_line(src.Repo(kind, url=str(out / "apt" / kind), bundle=str(out / "apt" / kind)), "")
        for kind in ("nvidia-container", "nvidia-cuda")
    ]
    assert all(line.startswith(f"deb [signed-by={src.BUNDLE_KEYRING}] file:") for line in lines)
    assert not any("trusted" in line for line in lines)
    # The key where the deploy puts it on a node: here, the bundle's own copy.
    sources = "".join(lines).replace(src.BUNDLE_KEYRING, str(out / BUNDLE_KEY))
    env = private_apt(tmp_path / "apt", sources)
    update = apt_update(env)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "W:" not in update.stdout + update.stderr
    toolkit = [f"{p}=1.20.0-1" for p in PINNED[CONTAINER]]
    # As the deploys ask: the toolkit at =version, the rest held by the pins above.
    wanted = [*toolkit, "nvidia-dkms-550-open", "nvidia-kernel-open-550", "nvidia-driver-550-open", "cuda-drivers-550"]
    wanted += [
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda12",
        "datacenter-gpu-manager-4-proprietary",
        "datacenter-gpu-manager-4-proprietary-cuda12",
        "datacenter-gpu-manager-exporter",
    ]
    cmd = ["apt-get", "-q", "-y", "--no-install-recommends", "--download-only", "install", *wanted]
    inst = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    got = {line.split()[3]: line.split()[4] for line in inst.stdout.splitlines() if line.startswith("Get:")}
    assert got == {**PINNED[CONTAINER], **PINNED[CUDA]}
    # apt checks the index's checksums: a changed .deb is refused.
    deb = out / CUDA / "nvidia-utils-550_550.163.01-0ubuntu1_amd64.deb"
    deb.write_bytes(deb.read_bytes() + b"x")
    inst = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert inst.returncode != 0
    assert "Hash Sum mismatch" in inst.stdout + inst.stderr or "Size mismatch" in inst.stdout + inst.stderr

    # apt checks the signature: an index changed after signing is refused ...
    packages = out / CONTAINER / "Packages"
    packages.write_text(packages.read_text().replace("1.20.0-1", "1.17.9-1", 1))
    update = apt_update(env, fresh=True)
    assert update.returncode != 0
    assert "Hash Sum mismatch" in update.stdout + update.stderr or "unexpected size" in update.stdout + update.stderr
    # ... and so is an InRelease over that index signed by another key (the upstream test key here).
    resigned = repo_key.clearsign(release_text(CONTAINER, {"Packages": packages.read_bytes()}))
    (out / CONTAINER / "InRelease").write_bytes(resigned)
    update = apt_update(env, fresh=True)
    assert update.returncode != 0
    assert "NO_PUBKEY" in update.stdout + update.stderr and "is not signed" in update.stdout + update.stderr


def test_release_files_without_a_source_can_be_placed_by_hand(
    served: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    spec_file = write_spec(tmp_path, served.url, repo_key.fingerprint)
    spec_file.write_text("\n".join(x for x in spec_file.read_text().splitlines() if "artifacts:" not in x) + "\n")
    out = tmp_path / "bundle"
    exporter = "pyxis-0.24.0.tar.gz"  # any release file: this one is placed by hand
    (out / "artifacts").mkdir(parents=True)
    (out / "artifacts" / exporter).write_bytes(ARTIFACTS[exporter])  # the bytes whose sha256 the spec pins
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    m = manifest(out)
    files = {f["path"]: f for f in m["files"]}
    assert (
        files[f"artifacts/{exporter}"]["checksum"]
        == f"placed in the bundle by hand; sha256 known beforehand: {PINNED_IN_SPEC}"
    )
    assert files[f"artifacts/{exporter}"]["source"] is None
    missing = {x["what"]: x for x in m["missing"]}
    assert set(missing) == {f"artifacts/{n}" for n in ARTIFACTS if n != exporter}
    for x in missing.values():
        assert x["url"] is None
        assert "mirror mode without sources.mirrors.artifacts" in x["error"] and "place the file at" in x["error"]
    assert not any("/artifacts/" in p for p in served.requests)


def test_cli_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {name: x}\n")
    cp = run_bundle(str(bad), "-o", str(tmp_path / "out"))
    assert cp.returncode == 2
    assert "node_groups: required field is missing" in cp.stderr
    assert not (tmp_path / "out").exists()
    cp = run_bundle()
    assert cp.returncode == 2 and "usage: gpuforge bundle SPEC -o DIR" in cp.stderr
    # --verify without a pinned key checks nothing: exit 2 naming the option.
    cp = run_bundle("--verify", str(tmp_path))
    assert cp.returncode == 2 and "--verify needs --fingerprint FPR" in cp.stderr and "OK" not in cp.stdout
    cp = run_bundle("--verify", str(tmp_path), "--fingerprint", "3BF863CC")
    assert cp.returncode == 2 and "--fingerprint: '3BF863CC' is not an OpenPGP v4 fingerprint" in cp.stderr
    cp = run_bundle("--verify", str(tmp_path), "--fingerprint", RENDER_ONLY_BUNDLE_FINGERPRINT, "--json")
    assert cp.returncode == 1
    report = json.loads(cp.stdout)
    assert report["ok"] is False and f"{BUNDLE_KEY}: cannot read it as a regular file" in report["problems"][0]
    assert "Traceback" not in cp.stderr


def test_two_distros_with_different_builds_conflict(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """One apt/nvidia-cuda/ serves every node: a package built differently per distro is reported."""
    shutil.copytree(served.root / "cuda", served.root / "cuda-ubuntu2404")
    debian = served.root / "cuda-debian12"
    shutil.copytree(served.root / "cuda", debian)
    rebuilt = build_deb(tmp_path, "datacenter-gpu-manager-4-core", "1:4.2.3-1", "libc6 (>= 2.36), libnvidia-ml1")
    shutil.move(rebuilt, debian / "pool" / rebuilt.name)  # same name and version, another build
    # NVIDIA's debian12 repository names the driver the Debian way (nvidia-kernel-open-dkms), versions "-1"
    for name, deps in (
        ("nvidia-kernel-open-dkms", "dkms"),
        ("nvidia-open", "nvidia-kernel-open-dkms (= 550.163.01-1)"),
    ):
        deb = build_deb(tmp_path, name, "550.163.01-1", deps)
        shutil.move(deb, debian / "pool" / deb.name)
    index_repo(debian, gz=True, key=repo_key)
    text = write_spec(tmp_path, served.url, repo_key.fingerprint).read_text()
    text = text.replace(f"{served.url}/cuda\n", f"{served.url}/cuda-{{distro}}\n")
    text = text.replace(
        "  - name: gpu\n",
        "  - name: deb\n    hosts: deb01\n    os: debian12\n    roles: [compute]\n"
        "    hardware: {gpu: {model: H100-80GB, count: 8}, sockets: 1, cores_per_socket: 4, threads_per_core: 1,\n"
        "      real_memory_mb: 8000}\n  - name: gpu\n",
    )
    spec_file = tmp_path / "mixed.yaml"
    spec_file.write_text(text)
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec_file), "-o", str(out))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    m = manifest(out)
    cuda = next(r for r in m["repositories"] if r["path"] == CUDA)
    assert sorted(s["distro"] for s in cuda["sources"]) == ["debian12", "ubuntu2404"]
    # (the open flavor's packages differ by name here: Ubuntu's 550 has no nvidia-open, Debian's has)
    assert sorted(x["what"] for x in m["missing"]) == [f"{CUDA}: datacenter-gpu-manager-4-core"]
    assert all("one apt/nvidia-cuda/ cannot serve both" in x["error"] for x in m["missing"])
    # Identical builds (the proprietary package here) are shared.
    assert "datacenter-gpu-manager-4-proprietary" in {p["package"] for p in cuda["packages"]}
