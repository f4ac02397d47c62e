"""The package-manager rows (deploy.package_manager), EL Slurm's names and the Ubuntu 22.04 refusal:
facts in, exact commands and issues out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.apt import APT_UPDATE, install_command
from gpuforge.deploy.converge import Layer, LayerFacts, StepKind, plan_layer, refresh_step
from gpuforge.deploy.package_manager import DEB, RPM, manager_for
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.platform_sources import SOURCES
from gpuforge.spec.platforms import DISTRIBUTIONS, OsFamily
from gpuforge.spec.slurm_packages import LOGICAL, SITE_PACKAGES, SlurmSource, package_for
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = Path(__file__).parent / "upstream"


def names(file: str) -> set[str]:
    lines = (UPSTREAM / file).read_text().splitlines()
    return {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}


@pytest.mark.parametrize("os", list(OsFamily))
def test_each_platform_row_selects_its_package_manager(os: OsFamily) -> None:
    assert manager_for(os) is (DEB if DISTRIBUTIONS[os].package_format.value == "deb" else RPM)
    assert manager_for(os).tool == ("apt" if os.is_deb else "dnf")


def test_the_deb_row_is_apts_commands_byte_for_byte() -> None:
    pkgs = ["slurmd=23.11.4-1.2ubuntu5", "munge"]
    assert DEB.install(pkgs) == install_command(pkgs)
    assert DEB.install(pkgs, downgrades=True, update_first=True) == install_command(
        pkgs, downgrades=True, update_first=True
    )
    assert DEB.refresh == APT_UPDATE and DEB.pin("slurmd=23.11.4") == "slurmd=23.11.4"


def test_the_rpm_row_installs_with_dnf_in_dnfs_pin_form() -> None:
    assert RPM.install(["slurm-slurmd=22.05.6", "munge"]) == "dnf -y install slurm-slurmd-22.05.6 munge"
    assert (
        RPM.install(["--disableexcludes=k8s", "kubelet=1.31.4"])
        == "dnf -y install --disableexcludes=k8s kubelet-1.31.4"
    )
    assert RPM.hold_command(["slurm"]) == "dnf versionlock add slurm"
    assert RPM.repair is None and DEB.repair is not None


def test_plan_layer_installs_an_rpm_layer_with_dnf_and_a_deb_layer_with_apt() -> None:
    for rpm, start in ((True, "dnf -y install slurm-slurmd-22.05.6 slurm-22.05.6"), (False, DEB.repair or "")):
        layer = Layer("slurm-config", packages=("slurm-slurmd=22.05.6", "slurm=22.05.6"), rpm=rpm, hold_pins=True)
        steps, _ = plan_layer(layer, LayerFacts())
        (install,) = [s for s in steps if s.kind is StepKind.INSTALL]
        assert (install.command or "").startswith(start)
        assert ("apt-get" in (install.command or "")) is not rpm


def test_an_rpm_pin_without_release_matches_every_release_of_its_version() -> None:
    layer = Layer("slurm-config", packages=("slurm-slurmd=22.05.6",), rpm=True, hold_pins=True)
    same = plan_layer(layer, LayerFacts(packages={"slurm-slurmd": "22.05.6-3.el9"}))[0]
    assert [s for s in same if s.kind is StepKind.UPGRADE] == []
    older = plan_layer(layer, LayerFacts(packages={"slurm-slurmd": "22.05.5-1.el9"}))[0]
    (up,) = [s for s in older if s.kind is StepKind.UPGRADE]
    assert up.command == "dnf -y install slurm-slurmd-22.05.6"


def test_refresh_steps() -> None:
    assert refresh_step(True, "x").command == "dnf -q -y makecache"
    assert refresh_step(True, "x").summary == "dnf makecache (x)"
    assert refresh_step(False, "y").kind is StepKind.APT_UPDATE and refresh_step(False, "y").command == APT_UPDATE


def test_el_distro_slurm_is_epels_names_and_site_slurm_schedmds() -> None:
    epel, smd_rpm, smd_deb = (names(f"{x}-packages.txt") for x in ("epel9-slurm", "schedmd-rpm", "schedmd-deb"))
    for logical in LOGICAL:
        for source, deb, cited in (
            (SlurmSource.DISTRO, False, epel),
            (SlurmSource.SITE, False, smd_rpm),
            (SlurmSource.SITE, True, smd_deb),
        ):
            pkg = package_for(source, deb, logical)
            assert pkg is None or pkg in cited, (source, deb, logical, pkg)
    assert package_for(SlurmSource.DISTRO, False, "slurmctld") == "slurm-slurmctld"
    assert package_for(SlurmSource.DISTRO, False, "slurm-client") == "slurm"
    assert package_for(SlurmSource.DISTRO, True, "slurm-client") == "slurm-client"
    assert SITE_PACKAGES["rpm"]["slurmd"] == "slurm-slurmd"


def test_cgroup_v2_only_rows_cite_it() -> None:
    rows = [d for d in DISTRIBUTIONS.values() if d.cgroup_v2_only]
    assert {d.os for d in rows} == {OsFamily.UBUNTU2204, OsFamily.UBUNTU2404, OsFamily.DEBIAN13}
    assert all({"ubuntu-cgroup-v2", "debian13-cgroup-v2"} & set(d.sources) for d in rows)
    assert "cgroupv2" in SOURCES["ubuntu-cgroup-v2"].section
    assert "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE" in SOURCES["debian13-cgroup-v2"].section


def spec_data(os: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(yaml.safe_load((REPO / "inventories/slurm-h100.yaml").read_text())))
    data["cluster"]["os"] = os
    data["sources"] = {"mode": "upstream"}
    data["slurm"]["gpu_autodetect"] = "auto"
    data["node_groups"] = [g for g in data["node_groups"] if not g.get("mig_config")]
    data["slurm"]["partitions"] = [p for p in data["slurm"]["partitions"] if p["nodes"] != "mig"]
    return data


def test_ubuntu2204_distro_slurm_with_cgroup_plugins_is_refused_naming_source_and_group() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(yaml_text.dump(spec_data("ubuntu22.04")))
    text = err.value.format()
    assert "slurm.source: node group 'gpu' (Ubuntu 22.04 LTS): the distribution's Slurm is 21.08.5" in text
    assert "Ubuntu 22.04 LTS mounts only cgroup v2" in text and "Set slurm.source: site" in text
    assert "node group 'mon'" not in text  # no Slurm role there


@pytest.mark.parametrize(
    ("os", "change"),
    [
        ("ubuntu22.04", {"source": "site"}),
        ("ubuntu22.04", {"process_tracking": "linuxproc"}),
        ("ubuntu24.04", {}),
        ("rocky9", {}),
    ],
)
def test_what_the_cgroup_refusal_leaves_alone(os: str, change: dict[str, str]) -> None:
    data = spec_data(os)
    data["slurm"].update(change)
    if change.get("source") == "site":
        data["versions"]["slurm"] = "24.11.5"
    parse_spec(yaml_text.dump(data))
