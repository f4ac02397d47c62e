"""Slurm versions mixed in one cluster (``gpuforge/spec/slurm_mix_rules.py``): what SchedMD allows passes,
what it forbids is refused on the group to change (the refusals themselves: ``bad/slurm_compute_*.yaml``)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.spec import parse_spec
from gpuforge.spec.model import Spec
from gpuforge.spec.rules import check_rules
from gpuforge.spec.slurm_mix_rules import SOURCES, group_slurm_versions, slurm_release_rules
from tests import yaml_text

HW = {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2, "real_memory_mb": 500000}


def spec(ctl_os: str, compute_os: str, db_os: str | None = None, **extra: Any) -> Any:
    """The whole spec, checked by every rule (a refused combination raises)."""
    return parse_spec(yaml_text.dump(spec_doc(ctl_os, compute_os, db_os, **extra)))


def spec_doc(ctl_os: str, compute_os: str, db_os: str | None = None, **extra: Any) -> dict[str, Any]:
    groups: list[dict[str, Any]] = [{"name": "ctl", "hosts": "ctl1", "os": ctl_os, "roles": ["controller"]}]
    if db_os:
        groups.append({"name": "db", "hosts": "db1", "os": db_os, "roles": ["accounting-db"]})
    groups.append({"name": "gpu", "hosts": "gpu[1-2]", "os": compute_os, "roles": ["compute"], "hardware": HW})
    slurm: dict[str, Any] = {
        "accounting": {"enabled": db_os is not None},
        "partitions": [{"name": "b", "nodes": "gpu"}],
    }
    doc = {"cluster": {"name": "t", "scheduler": "slurm", "os": ctl_os}, "node_groups": groups, "slurm": slurm}
    for key, value in extra.items():
        doc.setdefault(key, {}).update(value)
    return doc


def issues(s: Any) -> list[str]:
    return [f"{i.path}: {i.message}" for i in slurm_release_rules(s)]


def test_an_older_slurmd_inside_the_window_is_allowed() -> None:
    """Controller and slurmdbd on Ubuntu 24.04 (23.11), computes on Debian 12 (22.05): 23.11 talks to 22.05."""
    s = spec("ubuntu24.04", "debian12", db_os="ubuntu24.04")
    assert [(g.name, g.major) for g in group_slurm_versions(s)] == [("ctl", "23.11"), ("db", "23.11"), ("gpu", "22.05")]
    assert issues(s) == []
    assert not [i for i in check_rules(s) if i.path.endswith(".os")]


def test_a_newer_slurmd_than_the_controller_is_refused_on_its_group() -> None:
    found = issues(Spec.model_validate(spec_doc("debian12", "ubuntu24.04")))
    assert len(found) == 1 and found[0].startswith(
        "node_groups[1].os: slurmd of node group 'gpu' (gpu[1-2]: Ubuntu 24.04"
    )
    assert "is newer than slurmctld of node group 'ctl' (ctl1: Debian 12 (bookworm), Slurm 22.05.8)" in found[0]


def test_slurmctld_hosts_on_two_releases_are_refused() -> None:
    doc = spec_doc("debian12", "debian12")
    doc["node_groups"].insert(1, {"name": "ctl2", "hosts": "ctl2", "os": "ubuntu24.04", "roles": ["controller"]})
    found = issues(Spec.model_validate(doc))
    assert len(found) == 1 and found[0].startswith("node_groups[1].os: slurmctld hosts at different Slurm releases")


@pytest.mark.parametrize(
    "extra",
    [
        {"versions": {"slurm": "24.11.5-1"}},  # one pinned build on every node
        {"slurm": {"source": "site"}},  # the site's repository: one version, read from the nodes
    ],
)
def test_mixed_operating_systems_with_one_slurm_are_allowed(extra: dict[str, Any]) -> None:
    s = spec("debian12", "ubuntu24.04", **extra)
    assert group_slurm_versions(s) == [] and issues(s) == []


def test_a_platform_whose_slurm_is_not_in_the_table_is_not_guessed() -> None:
    """EL 9's EPEL Slurm has no version in gpuforge's table: the group is left out, not assumed."""
    s = spec("debian12", "rocky9")
    assert [g.name for g in group_slurm_versions(s)] == ["ctl"] and issues(s) == []


def test_every_rule_cites_schedmd() -> None:
    assert "same or higher major release" in SOURCES["slurm-daemon-order"].section
    assert SOURCES["slurm-daemon-order"].where.startswith("https://slurm.schedmd.com/upgrades.html")
