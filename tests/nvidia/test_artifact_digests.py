"""Release files are used only with a known sha256, checked on the node before use.

The table (``gpuforge.spec.artifact_digests``) cites every digest; the spec's
``sources.artifact_sha256`` adds to it; a release file known to neither is never fetched and its
step says how to pin it. The planned commands check the sha256 before the file is moved where
the install takes it, and a changed file fails the command for real (run here against files served
on 127.0.0.1).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.bundle.downloads import spec_needs
from gpuforge.deploy.converge import plan_layer
from gpuforge.deploy.layers.k8s_addons import HELM, addons
from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import artifact_digests, k8s_upstream, parse_spec
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.errors import SpecError
from gpuforge.spec.model import OsFamily
from gpuforge.spec.platforms import platform_for
from tests import yaml_text
from tests.conftest import REPO
from tests.nvidia.test_nvidia_plan import facts_for, layer_for, load_case

FIXTURES = Path(__file__).parent / "fixtures"
H100 = REPO / "inventories" / "slurm-h100.yaml"
K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
HEX64 = re.compile(r"[0-9a-f]{64}")


def spec(path: Path, pins: dict[str, str] | None = None) -> Any:
    """The spec of ``path`` from upstream, with ``pins``."""
    data = yaml.safe_load(path.read_text())
    data["sources"] = {"mode": "upstream", "artifact_sha256": dict(pins or {})}
    return parse_spec(yaml_text.dump(data))


def every_artifact(s: Any) -> list[src.Artifact]:
    """Every release file the deploys and the bundle can use for ``s`` (both OS families, every add-on)."""
    out = [
        a
        for os_family in (OsFamily.UBUNTU2404, OsFamily.RHEL9)
        for a in src.enroot_artifacts(s, platform_for(os_family))
    ]
    out += [src.mig_manager_artifact(s, platform_for(o)) for o in (OsFamily.UBUNTU2404, OsFamily.RHEL9)]
    out += [src.pyxis_artifact(s)]
    return out


def k8s_artifacts(pins: dict[str, str] | None = None) -> list[src.Artifact]:
    """The add-ons' release files for every pod network and queue controller."""
    out: list[src.Artifact] = []
    for plugin in ("flannel", "calico"):
        for kind, version in (("kueue", "v0.19.2"), ("volcano", "v1.15.1")):
            data = yaml.safe_load(K8S.read_text())
            data["sources"] = {"mode": "upstream", "artifact_sha256": dict(pins or {})}
            data["kubernetes"]["cni"] = {"plugin": plugin}
            data["kubernetes"]["batch_queue"].update(kind=kind, version=version)
            out += arts.addon_artifacts(parse_spec(yaml_text.dump(data)))
    return out


def kind_of(name: str) -> str:
    """The ``UNPUBLISHED`` key a release file belongs to (its name's first word)."""
    return next((k for k in artifact_digests.UNPUBLISHED if name.startswith(k)), name)


# --------------------------------------------------------------------------- the table


def test_every_known_digest_is_cited() -> None:
    assert artifact_digests.KNOWN, "the table is not empty"
    for name, d in artifact_digests.KNOWN.items():
        assert HEX64.fullmatch(d.sha256), name
        assert re.fullmatch(r"[0-9a-f]{40}", d.commit), name
        assert d.source in artifact_digests.SOURCES, name
    for key, cite in artifact_digests.SOURCES.items():
        assert cite.title and cite.where and cite.section, key
    assert all(why.strip() for why in artifact_digests.UNPUBLISHED.values())


def test_the_default_versions_of_published_files_are_in_the_table() -> None:
    """helm, flannel and calico at the spec's defaults need no pin (cited in the table)."""
    for name in (
        k8s_upstream.helm_tarball("3.16.3")[0],
        k8s_upstream.cni_manifest("flannel", k8s_upstream.CNI_DEFAULT_VERSIONS["flannel"])[0],
        k8s_upstream.cni_manifest("calico", k8s_upstream.CNI_DEFAULT_VERSIONS["calico"])[0],
    ):
        assert artifact_digests.known_digest(name) is not None, name
    helm = artifact_digests.KNOWN["helm-v4.2.4-linux-amd64.tar.gz"]
    # helm 4.2.4 release notes, get.helm.sh
    assert helm.sha256 == "c306b46f719b0a4da32d0f78ee21bf90ce8d602f15b22ab753f0674d1670a7f3"


def test_every_upstream_url_is_https() -> None:
    """Every upstream URL constant and every artifact's upstream URL: https only (a site mirror may be http)."""
    constants = [
        value
        for module in (src, table, k8s_upstream)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str) and re.match(r"https?://", value)
    ]
    assert len(constants) >= 10
    urls = constants + [a.url or "" for a in [*every_artifact(spec(H100)), *k8s_artifacts()] if a.url]
    repos = [src.cuda_repo(spec(H100), platform_for(o)) for o in OsFamily]
    urls += [r.key_url or "" for r in repos if r.available]
    assert [u for u in urls if not u.startswith("https://")] == []
    # a release whose CUDA repository gpuforge does not use says why (Debian 13: platforms.cuda_repo_refused)
    assert all(r.reason for r in repos if not r.available) and any(not r.available for r in repos)


# --------------------------------------------------------------------------- every artifact has a digest source


def test_every_artifact_has_a_digest_source_or_is_never_fetched() -> None:
    """Without pins: a release file is available only with the cited table's sha256; every other one
    is unavailable, says how to pin it, and is a kind the table says nobody publishes a sha256 for."""
    for a in [*every_artifact(spec(H100)), *k8s_artifacts()]:
        known = artifact_digests.known_digest(a.name)
        if known is not None:
            assert a.available and a.sha256 == known.sha256, a
            continue
        assert not a.available and a.sha256 is None, a
        assert a.name in (a.reason or "") and "sources.artifact_sha256" in (a.reason or ""), a
        assert kind_of(a.name) in artifact_digests.UNPUBLISHED, f"{a.name}: no digest source and no reason why"
        with pytest.raises(ValueError):
            src.fetch_command(a)


def test_a_pin_in_the_spec_makes_every_artifact_usable_and_overrides_the_table() -> None:
    names = {a.name for a in [*every_artifact(spec(H100)), *k8s_artifacts()]}
    pins = {n: hashlib.sha256(n.encode()).hexdigest() for n in names}
    pinned = [*every_artifact(spec(H100, pins)), *k8s_artifacts(pins)]
    for a in pinned:
        if a.url is None:  # dcgm-exporter: nothing upstream; the pin is kept for the mirror or the bundle
            assert a.sha256 == pins[a.name] and "no upstream download" in (a.reason or "")
            continue
        assert a.available and a.sha256 == pins[a.name], a
        assert "sources.artifact_sha256" in (a.sha256_from or "")


def test_the_bundle_needs_no_file_outside_the_known_kinds() -> None:
    """What ``gpuforge bundle`` fetches for the example clusters: each release file is in the table
    or of a kind that needs the operator's pin."""
    for path in (H100, K8S, REPO / "inventories" / "lab.yaml"):
        for name in spec_needs(load_upstream(path)).artifacts:
            assert artifact_digests.known_digest(name) or kind_of(name) in artifact_digests.UNPUBLISHED, name


def load_upstream(path: Path) -> Any:
    data = yaml.safe_load(path.read_text())
    data["sources"] = {"mode": "upstream"}
    return parse_spec(yaml_text.dump(data))


def test_cuda_keyring_is_checked_by_the_key_it_carries() -> None:
    a = src.cuda_keyring_artifact(src.cuda_repo(spec(H100), platform_for(OsFamily.UBUNTU2404)))
    assert a.available and a.sha256 is None and a.verified_by == src.CUDA_KEYRING_CHECK
    pinned = src.cuda_keyring_artifact(
        src.cuda_repo(spec(H100), platform_for(OsFamily.UBUNTU2404)), spec(H100, {src.CUDA_KEYRING_DEB: "c" * 64})
    )
    assert "sha256sum -c" in src.fetch_command(pinned)


@pytest.mark.parametrize(
    ("pins", "problem"),
    [
        ({"enroot_4.1.2-1_amd64.deb": "abc"}, "is not a sha256"),
        ({"enroot_4.1.2-1_amd64.deb": "g" * 64}, "is not a sha256"),
        ({"../enroot.deb": "a" * 64}, "is not a release file name"),
        ({"a/b.deb": "a" * 64}, "is not a release file name"),
        ({".hidden": "a" * 64}, "is not a release file name"),
    ],
)
def test_pins_are_checked_when_the_spec_is_read(pins: dict[str, str], problem: str) -> None:
    with pytest.raises(SpecError, match=re.escape(problem)):
        spec(H100, pins)


def test_a_pin_is_written_in_lower_case() -> None:
    assert spec(H100, {"pyxis-0.24.0.tar.gz": "AB" * 32}).sources.artifact_sha256 == {"pyxis-0.24.0.tar.gz": "ab" * 32}


# --------------------------------------------------------------------------- the check comes before use


def _checked_before(command: str, use: str) -> None:
    check = command.index("sha256sum -c")
    assert check < command.index(use), command
    moved = re.search(r"&& mv \S+ (\S+)", command[check:])
    assert moved is not None and check + moved.start() < command.index(use), command


@pytest.mark.parametrize(
    ("fixture", "use"),
    [
        ("enroot_from_upstream_release", "apt-get"),
        ("enroot_rhel9_login_after_epel", "dnf"),
        ("enroot_from_artifacts_mirror", "apt-get"),
        ("pyxis_first_build_installs_build_deps", "tar -xzf"),
        ("mig_manager_other_release_is_replaced", "apt-get"),
    ],
)
def test_planned_fetches_check_the_sha256_before_use(fixture: str, use: str, tmp_path: Path) -> None:
    case = load_case(FIXTURES / f"{fixture}.json", tmp_path)
    _, layer = layer_for(case)
    steps, _ = plan_layer(layer, facts_for(case, layer))
    fetching = [s.command for s in steps if s.command and "curl -fsSL" in s.command]
    assert fetching, [s.summary for s in steps]
    for command in fetching:
        _checked_before(command, use)


def test_planned_add_ons_check_the_sha256_before_use() -> None:
    pins = {"gpu-operator-v26.7.0.tgz": "1" * 64, "kueue-v0.19.2-manifests.yaml": "2" * 64}
    data = yaml.safe_load(K8S.read_text())
    data["sources"] = {"mode": "upstream", "artifact_sha256": pins}
    by_name = {a.name: a.command or "" for a in addons(parse_spec(yaml_text.dump(data)))}
    _checked_before(by_name["cni"], "kubectl apply")
    _checked_before(by_name["helm"], "tar -xzf")
    _checked_before(by_name["gpu-operator"], "upgrade --install")
    _checked_before(by_name["queue-controller"], "kubectl apply")


def test_unpinned_add_ons_are_reported_not_fetched() -> None:
    data = yaml.safe_load(K8S.read_text())
    data["sources"] = {"mode": "upstream"}
    by_name = {a.name: a for a in addons(parse_spec(yaml_text.dump(data)))}
    for name, file in (("gpu-operator", "gpu-operator-v26.7.0.tgz"), ("queue-controller", "kueue-v0.19.2-manifests")):
        assert by_name[name].command is None
        assert file in (by_name[name].reason or "") and "sources.artifact_sha256" in (by_name[name].reason or "")
    assert by_name["cni"].command is not None and by_name["helm"].command is not None  # cited in the table


# --------------------------------------------------------------------------- a changed file fails for real


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on 127.0.0.1 only, and its base URL."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args, **kwargs: None  # type: ignore[method-assign]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def run_on_node(command: str, downloads: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A node's shell running ``command`` with the download directory at ``downloads``."""
    command = command.replace(src.DOWNLOAD_DIR, str(downloads)).replace(src.BUNDLE_ON_NODE, str(downloads))
    environment = {"PATH": os.environ["PATH"], "no_proxy": "127.0.0.1", **(env or {})}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, env=environment)


GOOD = b"the release file as upstream published it\n"


def test_a_download_with_the_known_sha256_is_moved_into_place(served: tuple[Path, str], tmp_path: Path) -> None:
    root, base = served
    (root / "f.deb").write_bytes(GOOD)
    a = src.Artifact("f.deb", url=f"{base}/f.deb", sha256=hashlib.sha256(GOOD).hexdigest())
    downloads = tmp_path / "downloads"
    cp = run_on_node(src.fetch_command(a), downloads)
    assert cp.returncode == 0, cp.stderr
    assert (downloads / "f.deb").read_bytes() == GOOD and not (downloads / "f.deb.part").exists()


def test_a_changed_download_fails_the_command_and_is_removed(served: tuple[Path, str], tmp_path: Path) -> None:
    root, base = served
    (root / "f.deb").write_bytes(GOOD.replace(b"published", b"PUBLISHED"))  # one byte changed: tampered
    a = src.Artifact("f.deb", url=f"{base}/f.deb", sha256=hashlib.sha256(GOOD).hexdigest())
    downloads = tmp_path / "downloads"
    cp = run_on_node(f"{src.fetch_command(a)} && echo installed", downloads)
    assert cp.returncode != 0 and "installed" not in cp.stdout
    assert "FAILED" in cp.stdout and "did NOT match" in cp.stderr  # sha256sum -c's own words
    assert "gpuforge: f.deb is not the file of sha256" in cp.stderr
    assert list(downloads.iterdir()) == []  # neither the file nor its .part is left where install would take it


def test_a_changed_file_never_replaces_a_checked_one(served: tuple[Path, str], tmp_path: Path) -> None:
    root, base = served
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "f.deb").write_bytes(GOOD)  # an earlier run's checked download
    (root / "f.deb").write_bytes(b"something else\n")
    a = src.Artifact("f.deb", url=f"{base}/f.deb", sha256=hashlib.sha256(GOOD).hexdigest())
    assert run_on_node(src.fetch_command(a), downloads).returncode != 0
    assert (downloads / "f.deb").read_bytes() == GOOD


def test_a_changed_pushed_bundle_file_fails_the_command(tmp_path: Path) -> None:
    pushed = tmp_path / "pushed"
    pushed.mkdir()
    (pushed / "f.deb").write_bytes(b"changed on the way\n")
    a = src.Artifact("f.deb", local="/control/host/bundle/artifacts/f.deb", sha256=hashlib.sha256(GOOD).hexdigest())
    assert run_on_node(src.fetch_command(a), pushed).returncode != 0
    (pushed / "f.deb").write_bytes(GOOD)
    assert run_on_node(src.fetch_command(a), pushed).returncode == 0


def test_the_pyxis_build_never_starts_from_a_changed_tarball(served: tuple[Path, str], tmp_path: Path) -> None:
    """The planned pyxis step as a whole, under ``set -e``: a changed tarball stops it before tar and make."""
    root, base = served
    case = load_case(FIXTURES / "pyxis_first_build_installs_build_deps.json", tmp_path)
    _, layer = layer_for(case)
    steps, _ = plan_layer(layer, facts_for(case, layer))
    (command,) = [s.command for s in steps if s.command and "spank_pyxis.so" in s.command]
    (root / "pyxis-0.24.0.tar.gz").write_bytes(b"not the pinned tarball\n")
    url = src.pyxis_artifact(case["spec_obj"]).url or ""
    assert url in command
    command = command.replace(url, f"{base}/pyxis-0.24.0.tar.gz")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("tar", "make"):  # record whether the build went on
        (bin_dir / tool).write_text(f"#!/bin/sh\necho {tool} >> {tmp_path}/ran\n")
        (bin_dir / tool).chmod(0o755)
    cp = run_on_node(command, tmp_path / "downloads", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert cp.returncode != 0 and "did NOT match" in cp.stderr
    assert not (tmp_path / "ran").exists()


def test_a_changed_chart_archive_is_never_installed(tmp_path: Path) -> None:
    """The chart pull of the GPU Operator with a stand-in helm that 'pulls' a given file."""
    chart = tmp_path / "served-chart.tgz"
    helm = tmp_path / "helm"
    helm.write_text(
        "#!/bin/sh\n"  # helm pull CHART --repo URL --version V --destination DIR
        'while [ $# -gt 0 ]; do case "$1" in --destination) dest=$2; shift ;; esac; shift; done\n'
        f'mkdir -p "$dest" && cp {chart} "$dest/gpu-operator-v26.7.0.tgz"\n'
    )
    helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
    a = src.Artifact("gpu-operator-v26.7.0.tgz", url="https://helm.example", sha256=hashlib.sha256(GOOD).hexdigest())
    command = arts.chart_pull_command(a, str(helm)) + " && echo installed"
    assert HELM not in command
    chart.write_bytes(b"another chart\n")
    cp = run_on_node(command, tmp_path / "downloads")
    assert cp.returncode != 0 and "installed" not in cp.stdout
    assert list((tmp_path / "downloads").iterdir()) == []
    chart.write_bytes(GOOD)
    cp = run_on_node(command, tmp_path / "downloads")
    assert cp.returncode == 0 and cp.stdout.strip() == "installed", cp.stderr
    assert [p.name for p in (tmp_path / "downloads").iterdir()] == ["gpu-operator-v26.7.0.tgz"]
