"""Every platform the table claims converges, on simulated fresh nodes: ``plan --fresh`` of the
example Slurm cluster (controller, accounting, login, GPU compute, a non-GPU compute group) per
platform, checked against the package names upstream gives (``upstream/``, with provenance).

Rocky 9, Alma 9 and RHEL 9 take the distribution's Slurm from EPEL; Ubuntu 22.04 takes SchedMD's
(``slurm.source: site``: its own Slurm is refused); Ubuntu 24.04 its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge.cli import app
from gpuforge.orchestrate.fresh import fresh_plan
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.slurm_packages import SlurmSource, runtime_packages
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = Path(__file__).parent / "upstream"


def upstream_names(name: str) -> set[str]:
    """The package names of an upstream excerpt (first word of each non-comment line)."""
    lines = (UPSTREAM / name).read_text().splitlines()
    return {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}


#: os -> (slurm.source, the excerpt its Slurm's names come from, the package manager's install prefix)
PLATFORMS = {
    "rocky9": ("distro", "epel9-slurm-packages.txt", "dnf -y install "),
    "alma9": ("distro", "epel9-slurm-packages.txt", "dnf -y install "),
    "rhel9": ("distro", "epel9-slurm-packages.txt", "dnf -y install "),
    "ubuntu22.04": ("site", "schedmd-deb-packages.txt", "DEBIAN_FRONTEND=noninteractive apt-get"),
    "ubuntu24.04": ("distro", "ubuntu-noble-slurm.txt", "DEBIAN_FRONTEND=noninteractive apt-get"),
}
#: What each node's Slurm layer installs, by the role of its group (the names upstream gives).
ROLE_PACKAGES = {
    "epel9-slurm-packages.txt": {"ctl01": {"slurm-slurmctld", "slurm"}, "gpu001": {"slurm-slurmd", "slurm"},
                                 "cpu01": {"slurm-slurmd", "slurm"}, "login01": {"slurm"}},
    "schedmd-deb-packages.txt": {"ctl01": {"slurm-smd-slurmctld", "slurm-smd-client"},
                                 "gpu001": {"slurm-smd-slurmd", "slurm-smd-client"},
                                 "cpu01": {"slurm-smd-slurmd", "slurm-smd-client"}, "login01": {"slurm-smd-client"}},
    "ubuntu-noble-slurm.txt": {"ctl01": {"slurmctld", "slurm-client"}, "gpu001": {"slurmd", "slurm-client"},
                               "cpu01": {"slurmd", "slurm-client"}, "login01": {"slurm-client"}},
}  # fmt: skip


def spec_for(os: str, source: str, where: Path) -> Path:
    """inventories/slurm-h100.yaml on ``os`` from upstream sources, plus a non-GPU compute group."""
    data: dict[str, Any] = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["cluster"]["os"] = os
    data["sources"] = {"mode": "upstream"}
    data["slurm"]["source"] = source
    data["slurm"]["gpu_autodetect"] = "auto"  # each platform's NVML plugin row decides (slurm_gpu)
    # MIG slices need AutoDetect=nvml, which not every platform's Slurm carries: no MIG group here
    data["node_groups"] = [g for g in data["node_groups"] if not g.get("mig_config")]
    data["slurm"]["partitions"] = [p for p in data["slurm"]["partitions"] if p["nodes"] != "mig"]
    if source == "site":
        data["versions"]["slurm"] = "24.11.5"
    ctl = data["node_groups"][0]
    data["node_groups"].insert(1, {**ctl, "name": "cpu", "hosts": "cpu01", "address_start": "192.0.2.9",
                                   "roles": ["compute"], "leaf_switch": "leaf1"})  # fmt: skip
    data["ssh"]["key"] = str(where / "no-key")  # nothing connects: fresh plans read neither
    data["ssh"]["known_hosts"] = str(where / "no-known-hosts")
    path = where / f"{os}.yaml"
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


def installs(ops: list[dict[str, Any]], layer: str | None = None) -> list[str]:
    return [
        s["command"]
        for op in ops
        if layer is None or op["layer"] == layer
        for s in op["steps"]
        if s["kind"] in ("install", "upgrade") and s.get("command")
    ]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    where = tmp_path_factory.mktemp("fresh")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUFORGE_STATE_DIR", str(where / "state"))
    try:
        out = {}
        for os, (source, _, _) in PLATFORMS.items():
            result = fresh_plan(load_cluster(spec_for(os, source, where)))
            assert result.ok, result.errors
            out[os] = result.as_dict()["hosts"]
        return out
    finally:
        mp.undo()


@pytest.mark.parametrize("os", PLATFORMS)
def test_every_role_gets_the_slurm_packages_upstream_names(plans: dict[str, dict[str, Any]], os: str) -> None:
    source, excerpt, _ = PLATFORMS[os]
    cited = upstream_names(excerpt)
    for node, want in ROLE_PACKAGES[excerpt].items():
        assert want <= cited, f"{want - cited} not in {excerpt}"
        steps = [s for op in plans[os][node]["operations"] if op["layer"] == "slurm-config" for s in op["steps"]]
        named = [s["summary"].removeprefix("install ") for s in steps if s["kind"] == "install"]
        assert len(named) == 1, (node, named)
        got = {p.split("=")[0].removesuffix("-24.11.5").removesuffix("=24.11.5") for p in named[0].split(", ")}
        # What SchedMD's debs open without depending on it comes with them (slurm_packages schedmd-pmix-dlopen).
        runtime = set(runtime_packages(SlurmSource(source), not os.startswith(("rocky", "alma", "rhel"))))
        assert runtime <= got and got - runtime == want, (node, got)


@pytest.mark.parametrize("os", PLATFORMS)
def test_every_install_uses_the_platforms_package_manager(plans: dict[str, dict[str, Any]], os: str) -> None:
    _, _, prefix = PLATFORMS[os]
    rpm = prefix.startswith("dnf")
    for node, host in plans[os].items():
        for cmd in installs(host["operations"]):
            assert ("apt-get" in cmd) is not rpm, (os, node, cmd[:200])
            assert ("dnf " in cmd) is rpm, (os, node, cmd[:200])
        for op in host["operations"]:
            for s in op["steps"]:
                assert "apt-get" not in (s.get("command") or "") or not rpm, (os, node, s["summary"])


@pytest.mark.parametrize("os", ["rocky9", "alma9", "rhel9"])
def test_el_slurm_nodes_enable_crb_and_epel_before_slurm(plans: dict[str, dict[str, Any]], os: str) -> None:
    for node in ("ctl01", "db01", "gpu001", "cpu01", "login01"):
        ops = plans[os][node]["operations"]
        layers = [op["layer"] for op in ops]
        first = ops[layers.index("el-repos")]["steps"]
        assert "CodeReady Builder and EPEL 9" in first[0]["summary"], (os, node)
        assert "dnf config-manager --set-enabled crb" in first[0]["command"] or os == "rhel9"
        assert "subscription-manager" in first[0]["command"] or os != "rhel9"
        assert first[1]["command"] == "dnf -q -y makecache"
        slurm = "slurm-accounting" if node == "db01" else "slurm-config"
        assert layers.index("el-repos") < layers.index("munge") < layers.index(slurm)
        assert installs(ops, "munge") == ["dnf -y install munge"]
    mon = [op["layer"] for op in plans[os]["mon01"]["operations"]]  # no Slurm there: EPEL for monitoring
    assert mon.index("el-repos") < mon.index("node-exporter") and "munge" not in mon


def upstream_rows(name: str) -> dict[str, str]:
    """package -> unit of an upstream excerpt whose lines read ``package unit``."""
    lines = (UPSTREAM / name).read_text().splitlines()
    return dict(line.split()[:2] for line in lines if line.strip() and not line.startswith("#"))


#: os -> (node-exporter, prometheus, alertmanager) packages: EPEL 9's on EL 9, Ubuntu's archive names there.
MONITORING = {os: ("node-exporter", "golang-github-prometheus", "golang-github-prometheus-alertmanager")
              for os in ("rocky9", "alma9", "rhel9")} | {
    os: ("prometheus-node-exporter", "prometheus", "prometheus-alertmanager") for os in ("ubuntu22.04", "ubuntu24.04")
}  # fmt: skip


def service_names(ops: list[dict[str, Any]], layer: str) -> set[str]:
    steps = [s for op in ops if op["layer"] == layer for s in op["steps"] if s["kind"] in ("enable", "start")]
    return {s["summary"].split()[-1].removesuffix(".service") for s in steps}


@pytest.mark.parametrize("os", PLATFORMS)
def test_monitoring_installs_the_platforms_package_names_and_units(plans: dict[str, dict[str, Any]], os: str) -> None:
    exporter, prometheus, alertmanager = MONITORING[os]
    _, _, prefix = PLATFORMS[os]
    mon = plans[os]["mon01"]["operations"]
    if prefix.startswith("dnf"):
        cited = upstream_rows("epel9-monitoring-packages.txt")
        assert {exporter, prometheus, alertmanager} <= set(cited), "not in the EPEL 9 excerpt"
        assert installs(mon, "prometheus") == [f"dnf -y install {prometheus}"]
        assert installs(mon, "alertmanager") == [f"dnf -y install {alertmanager}"]
        for node in ("ctl01", "gpu001", "login01", "mon01"):
            assert installs(plans[os][node]["operations"], "node-exporter") == [f"dnf -y install {exporter}"], node
        units = {layer: service_names(mon, layer) for layer in ("node-exporter", "prometheus", "alertmanager")}
        assert units == {"node-exporter": {cited[exporter]}, "prometheus": {cited[prometheus]},
                         "alertmanager": {cited[alertmanager]}}, units  # fmt: skip
    words = {w for host in plans[os].values() for cmd in installs(host["operations"]) for w in cmd.split()}
    others = {p for names in MONITORING.values() for p in names} - {exporter, prometheus, alertmanager}
    assert not words & others, (os, words & others)  # no other platform's names reach this one's tool


def test_fresh_plan_of_ubuntu2204_with_its_own_slurm_exits_2_with_the_cgroup_reason(tmp_path: Path) -> None:
    path = spec_for("ubuntu22.04", "distro", tmp_path)
    result = CliRunner().invoke(app, ["plan", "--fresh", str(path)], env={"GPUFORGE_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "slurm.source: node group 'ctl' (Ubuntu 22.04 LTS)" in result.output
    assert "cgroup v1 only" in result.output and "slurm.source: site" in result.output
    assert "Traceback" not in result.output


def test_fresh_plan_json_of_rocky9_shows_dnf_and_epel_names_and_no_apt(tmp_path: Path) -> None:
    path = spec_for("rocky9", "distro", tmp_path)
    env = {"GPUFORGE_STATE_DIR": str(tmp_path / "state")}
    result = CliRunner().invoke(app, ["plan", "--fresh", "--json", str(path)], env=env)
    assert result.exit_code == 0, result.output
    text = result.stdout[result.stdout.index("{") :]
    hosts = json.loads(text)["hosts"]
    assert sorted(hosts) == ["cpu01", "ctl01", "db01", "gpu001", "login01", "mon01"]
    assert "dnf -y install slurm-slurmctld slurm" in text
    assert "apt-get" not in text and "slurmctld=" not in text
