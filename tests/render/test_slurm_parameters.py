"""The Slurm config files gpuforge renders hold only keys that the cluster's Slurm release takes
(``gpuforge/spec/slurm_parameters.py``), and every key the templates and renderers can write is cited there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpuforge.render.files import Secrets
from gpuforge.render.slurm import slurm_files
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.slurm_parameters import (
    CHECKED,
    PARAMETERS,
    SOURCES,
    VALUED,
    Parameter,
    problems,
    row,
    spec_majors,
)
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
HW = {"sockets": 2, "cores_per_socket": 8, "threads_per_core": 2, "real_memory_mb": 64000}
DRIVER = {"version": "580.173.02", "flavor": "open", "source": "nvidia"}
SECRETS = Secrets(slurmdbd_db_password="pw", munge_key=b"k" * 32, health_key=b"h")


def doc(os: str, version: str = "distro", source: str = "distro", gpu: bool = True, **slurm: Any) -> dict[str, Any]:
    """A controller (with slurmdbd and login) and two compute nodes under one leaf switch."""
    compute: dict[str, Any] = {"name": "n", "hosts": "n[1-2]", "roles": ["compute"], "leaf_switch": "leaf1"}
    compute["hardware"] = {**HW, "gpu": {"model": "H100-80GB", "count": 8}} if gpu else HW
    s: dict[str, Any] = {"source": source, "partitions": [{"name": "b", "nodes": "n", "default_time": "1:00:00"}]}
    if gpu:
        s.update(gpu_autodetect="nvml", mps={"enabled": True})
    if source == "build":
        tarball = f"http://198.51.100.7/slurm-wlm_{version.split('-')[0]}.orig.tar.gz"
        s["build"] = {"tarball": tarball, "hosts": ["ctl1"], "nvml": gpu}
    versions: dict[str, Any] = {"slurm": version, **({"driver": DRIVER} if gpu else {})}
    return {
        "cluster": {"name": "t", "scheduler": "slurm", "os": os},
        "versions": versions,
        "node_groups": [{"name": "ctl", "hosts": "ctl1", "roles": ["controller", "accounting-db", "login"]}, compute],
        "slurm": {**s, **slurm},
        "topology": {"switches": [{"name": "spine"}, {"name": "leaf1", "parent": "spine"}]},
    }


#: One spec per Slurm major gpuforge runs: the distributions' (Ubuntu 22.04's 21.08 only with
#: linuxproc: its cgroup plugin is v1 only), gpuforge's builds and a site repository's pins.
CASES = [
    ("21.08", doc("ubuntu22.04", process_tracking="linuxproc", preempt_mode="off", config_mode="configless")),
    ("22.05", doc("debian12")),
    ("22.05", doc("debian12", preempt_mode="off", config_mode="configless")),
    ("23.11", doc("ubuntu24.04")),
    ("24.11", doc("debian13", gpu=False)),
    ("24.11", doc("debian12", "24.11.5-1", "build")),
    ("25.05", doc("debian12", "25.05.3-1", "site")),
    ("25.11", doc("debian12", "25.11.2-1", "site", process_tracking="linuxproc")),
    ("26.05", doc("debian13", "26.05.5-1", "build", gpu=False, preempt_mode="off")),
]


@pytest.mark.parametrize(("major", "d"), CASES, ids=[f"{m}-{d['cluster']['os']}" for m, d in CASES])
def test_every_rendered_key_is_taken_by_the_clusters_slurm(major: str, d: dict[str, Any]) -> None:
    spec = parse_spec(yaml_text.dump(d))
    assert spec_majors(spec) == {major}
    seen: set[str] = set()
    for node in resolve_nodes(spec):
        for f in slurm_files(spec, node, SECRETS):
            name = f.path.rsplit("/", 1)[-1]
            if name in {"slurm.conf", "cgroup.conf", "gres.conf", "slurmdbd.conf", "topology.conf"}:
                seen.add(name)
                assert isinstance(f.content, str)
                assert problems(name, f.content, spec_majors(spec)) == []
    assert seen == {"slurm.conf", "cgroup.conf", "gres.conf", "slurmdbd.conf", "topology.conf"}


def test_a_key_a_release_refuses_or_the_table_lacks_is_named() -> None:
    conf = "SelectType=select/cons_res\nNodeName=n1 CPUs=4 Weight=2\nTaskPlugin=task/cgroup,task/affinity\n"
    assert problems("slurm.conf", conf, ["24.11"]) == [
        "slurm.conf: SelectType=select/cons_res has no row in gpuforge.spec.slurm_parameters (cite it)",
        "slurm.conf: Weight=2 has no row in gpuforge.spec.slurm_parameters (cite it)",
    ]
    cgroup = row("cgroup.conf", "CgroupPlugin", "autodetect")
    assert cgroup is not None and cgroup.accepted_by("21.08") and cgroup.accepted_by("26.05")
    removed = Parameter("slurm.conf", "X", None, "22.05", "25.05", ())
    assert [removed.accepted_by(m) for m in ("21.08", "22.05", "24.11", "25.05")] == [False, True, True, False]


def test_site_keys_of_extra_config_are_left_to_the_site() -> None:
    assert problems("slurm.conf", "MaxJobCount=20000\n", ["24.11"], extra=["MaxJobCount"]) == []


def _template_pairs() -> set[tuple[str, str, str]]:
    """(file, key, literal value) of every ``Key=`` line of templates/slurm/*.j2."""
    out = set()
    for path in (REPO / "templates" / "slurm").glob("*.conf.j2"):
        for key, value in re.findall(r"^([A-Za-z]+)=(\S*)", path.read_text(), re.M):
            out.add((path.name.removesuffix(".j2"), key, value))
    return out


def test_the_table_covers_every_key_the_templates_and_renderers_write() -> None:
    for file, key, value in _template_pairs():
        if "{" in value:  # a rendered value: the per-release renders above check it
            assert any(p.file == file and p.key == key for p in PARAMETERS), (file, key)
        else:
            assert row(file, key, value) is not None, (file, key, value)
    renderer = (REPO / "gpuforge" / "render" / "slurm.py").read_text()
    for key, value in re.findall(r'(?<=[" ])([A-Z][A-Za-z]+)=([a-z/_]*)', renderer):
        files = {p.file for p in PARAMETERS if p.key == key}
        assert files, key
        if value and any((f, key) in VALUED for f in files):
            assert any(row(f, key, value) for f in files), (key, value)


def test_every_row_cites_a_source_and_a_checked_release() -> None:
    for p in PARAMETERS:
        assert p.cites and all(c in SOURCES for c in p.cites), p
        assert p.since in CHECKED and (p.removed is None or p.removed in CHECKED), p


def _health_issues(d: dict[str, Any], node_state: str) -> list[str]:
    d["slurm"]["health_check"] = {"node_state": node_state}
    try:
        parse_spec(yaml_text.dump(d))
    except SpecError as e:
        return [line.strip() for line in e.format().splitlines()[1:]]
    return []


def test_a_health_check_state_the_clusters_slurm_ignores_is_refused_on_its_field() -> None:
    """22.05 logs 'Invalid HealthCheckNodeState value NONDRAINED_IDLE ignored' and checks in every state."""
    assert _health_issues(doc("debian12"), "NONDRAINED_IDLE,CYCLE") == [
        "slurm.health_check.node_state: NONDRAINED_IDLE came in Slurm 23.02; this cluster runs Slurm 22.05, "
        "which ignores it (slurm.conf(5): HealthCheckNodeState)"
    ]
    assert _health_issues(doc("ubuntu24.04"), "NONDRAINED_IDLE,CYCLE") == []
    assert _health_issues(doc("debian12", "26.05.5-1", "site"), "REBOOT_ONLY") == []
    assert _health_issues(doc("debian12", "25.11.2-1", "site"), "REBOOT_ONLY") == [
        "slurm.health_check.node_state: REBOOT_ONLY came in Slurm 26.05; this cluster runs Slurm 25.11, "
        "which ignores it (slurm.conf(5): HealthCheckNodeState)"
    ]
    (unknown,) = _health_issues(doc("ubuntu24.04"), "DRAINED")
    assert unknown.startswith("slurm.health_check.node_state: 'DRAINED' is no HealthCheckNodeState state of Slurm")
    assert _health_issues(doc("debian12", "distro", "site"), "NONDRAINED_IDLE") == []  # release not known here


def test_a_pin_that_is_no_known_slurm_release_is_checked_by_nothing_here_and_never_a_traceback() -> None:
    """``versions.slurm: 99.0.0-1`` (the lab's test of a pin no repository has) and a release newer than the
    table's: the release is not known before the nodes are read, so nothing is refused for it (apply names a
    missing package), and check never raises."""
    assert _health_issues(doc("debian12", "99.0.0-1", "site"), "NONDRAINED_IDLE") == []
    assert _health_issues(doc("debian12", "27.05.1-1", "site"), "REBOOT_ONLY") == []
    parse_spec(yaml_text.dump(doc("debian12", "99.0.0-1", "site")))
