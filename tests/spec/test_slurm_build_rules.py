"""``slurm.source: build`` (``gpuforge/spec/slurm_build_rules.py``): what a build needs is checked before
any host is touched, each refusal on the field to change."""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.spec import parse_spec
from gpuforge.spec.model import Spec
from gpuforge.spec.slurm_build_rules import build_hosts, known_sha256, slurm_build_rules
from gpuforge.spec.slurm_tarballs import SOURCES, TARBALLS
from tests import yaml_text

HW = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}
URL = "http://198.51.100.7/debian/pool/main/s/slurm-wlm/slurm-wlm_24.11.5.orig.tar.gz"


def doc(**build: Any) -> dict[str, Any]:
    groups: list[dict[str, Any]] = [
        {"name": "ctl", "hosts": "ctl1", "roles": ["controller", "accounting-db"]},
        {"name": "cpu", "hosts": "cpu[1-2]", "roles": ["compute"], "hardware": HW},
    ]
    slurm = {
        "source": "build",
        "build": {"tarball": URL, "hosts": ["ctl1"], **build},
        "partitions": [{"name": "b", "nodes": "cpu"}],
    }
    return {
        "cluster": {"name": "t", "scheduler": "slurm", "os": "debian12"},
        "versions": {"slurm": "24.11.5-1"},
        "node_groups": groups,
        "slurm": slurm,
    }


def issues(d: dict[str, Any]) -> list[str]:
    return [f"{i.path}: {i.message}" for i in slurm_build_rules(Spec.model_validate(d))]


def test_a_known_release_with_a_build_host_per_platform_passes_every_rule() -> None:
    s = parse_spec(yaml_text.dump(doc()))
    assert known_sha256(s) == TARBALLS["24.11.5"].sha256
    assert {k: n.name for k, n in build_hosts(s).items()} == {"debian12-x86_64": "ctl1"}


def test_build_without_its_section_and_the_section_without_build_are_refused() -> None:
    d = doc()
    del d["slurm"]["build"]
    assert issues(d) == ["slurm.build: slurm.source: build needs slurm.build (the tarball and the build hosts)"]
    d = doc()
    d["slurm"]["source"] = "distro"
    d["versions"]["slurm"] = "distro"
    assert issues(d) == ["slurm.build: slurm.build is read only with slurm.source: build (not distro)"]


@pytest.mark.parametrize("version", ["distro", "24.11.5", "24.11"])
def test_versions_slurm_must_be_the_package_version(version: str) -> None:
    d = doc()
    d["versions"]["slurm"] = version
    [found] = issues(d)
    assert found.startswith("versions.slurm: slurm.source: build needs versions.slurm as the package version")


def test_a_package_version_the_tarball_does_not_make_is_refused() -> None:
    d = doc()
    d["versions"]["slurm"] = "24.11.5-2"
    assert issues(d) == ["versions.slurm: the 24.11.5 tarball's debian/changelog says 24.11.5-1, not 24.11.5-2"]


def test_an_unknown_release_needs_a_pinned_digest_and_a_pin_must_match_the_table() -> None:
    d = doc()
    d["versions"]["slurm"] = "25.05.3-1"
    [found] = issues(d)
    assert found.startswith("slurm.build.sha256: gpuforge's table knows no tarball of Slurm 25.05.3")
    assert issues(doc(sha256="ab" * 32)) == [
        f"slurm.build.sha256: differs from the sha256 of Slurm 24.11.5's tarball in gpuforge's cited table "
        f"({TARBALLS['24.11.5'].sha256}): a different file"
    ]
    d["slurm"]["build"]["sha256"] = "cd" * 32
    assert issues(d) == []


def test_without_a_url_the_tarball_comes_from_the_offline_bundle_only() -> None:
    d = doc()
    del d["slurm"]["build"]["tarball"]
    [found] = issues(d)
    assert found.startswith("slurm.build.tarball: where the tarball comes from")
    d["sources"] = {"mode": "offline", "bundle_dir": "/srv/bundle", "bundle_fingerprint": "A" * 40}
    assert issues(d) == []


def test_build_hosts_are_nodes_one_per_platform_covering_every_slurm_node() -> None:
    assert issues(doc(hosts=["ctl9"])) == [
        "slurm.build.hosts[0]: 'ctl9' is not a node of the spec",
        "slurm.build.hosts: no build host of platform debian12-x86_64, which Slurm nodes ctl1, cpu1, cpu2 run: "
        "add one of them (packages are built on the platform they run on)",
    ]
    assert issues(doc(hosts=["ctl1", "cpu1"])) == [
        "slurm.build.hosts[1]: cpu1 and ctl1 are both debian12-x86_64: one build host per platform"
    ]
    d = doc()
    d["node_groups"][1]["os"] = "debian13"
    [found] = issues(d)
    assert "no build host of platform debian13-x86_64, which Slurm nodes cpu1, cpu2 run" in found
    d["slurm"]["build"]["hosts"] = ["ctl1", "cpu2"]
    assert issues(d) == []


def test_an_rpm_platform_is_built_on_its_own_build_host() -> None:
    """EL 9 builds slurm.spec (``rpmbuild -ta``): a Rocky 9 build host passes (refused before), and a
    cluster of Rocky 9 and Debian 12 nodes needs one build host of each."""
    d = doc()
    d["cluster"]["os"] = "rocky9"
    assert issues(d) == []
    s = parse_spec(yaml_text.dump(d))
    assert {k: n.name for k, n in build_hosts(s).items()} == {"rocky9-x86_64": "ctl1"}
    d["node_groups"][1]["os"] = "debian12"
    [found] = issues(d)
    assert "no build host of platform debian12-x86_64, which Slurm nodes cpu1, cpu2 run" in found
    d["slurm"]["build"]["hosts"] = ["ctl1", "cpu1"]
    assert issues(d) == []


def test_every_tarball_row_names_a_citation() -> None:
    for row in TARBALLS.values():
        assert row.citation in SOURCES and len(row.sha256) == 64 and row.deb_version.startswith(row.version + "-")


def test_nvml_autodetect_needs_a_build_with_nvml() -> None:
    d = doc()
    d["node_groups"][1]["hardware"]["gpu"] = {"model": "H100-80GB", "count": 8}
    d["versions"]["driver"] = {"version": "535.261.03", "source": "distro"}
    d["slurm"]["gpu_autodetect"] = "nvml"
    found = [f for f in issues(d) if f.startswith("slurm.build.nvml")]
    assert found == [
        "slurm.build.nvml: slurm.gpu_autodetect: nvml needs Slurm's NVML plugin (gpu_nvml.so), which the build makes "
        "only with nvml: true (libnvidia-ml-dev from Debian's non-free on deb build hosts; rpmbuild --with nvml "
        "and CUDA's nvml.h on EL build hosts)"
    ]
    d["slurm"]["build"]["nvml"] = True
    assert issues(d) == []
