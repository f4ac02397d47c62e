"""Pure lab helpers (no root needed): address plan, names, sources, cache key, state, CLI guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuforge.lab import cli, mirror, plan, rootfs, sources, system
from gpuforge.lab.lab_record import LabState, NodeState, load_state, save_state
from tests.conftest import REPO


def test_address_plan_is_fixed():
    nodes = plan.node_plan("10.213.0.0/24", 3)
    assert [(n.name, n.address) for n in nodes] == [
        ("node1", "10.213.0.11"),
        ("node2", "10.213.0.12"),
        ("node3", "10.213.0.13"),
    ]
    assert plan.bridge_address("10.213.0.0/24") == "10.213.0.1"
    assert plan.bridge_name("gflab") == "gf-gflab"
    assert plan.netns_name("gflab", "node2") == "gf-gflab-node2"
    assert plan.node_index("node12") == 12


def test_interface_names_fit_ifnamsiz():
    name = "abcdefghijkl"  # longest allowed
    assert len(plan.bridge_name(name)) <= 15
    assert len(plan.veth_host(name, "node99")) <= 15
    with pytest.raises(plan.PlanError):
        plan.validate_name(name + "m")
    for bad in ("Gflab", "1lab", "lab_", "lab-", ""):
        with pytest.raises(plan.PlanError):
            plan.validate_name(bad)


def test_subnet_checks():
    with pytest.raises(plan.PlanError, match="private"):
        plan.parse_subnet("8.8.8.0/24")
    with pytest.raises(plan.PlanError, match="too small"):
        plan.parse_subnet("10.0.0.0/28", 5)
    with pytest.raises(plan.PlanError):
        plan.parse_subnet("10.0.0.1/24")  # host bits set
    assert plan.parse_subnet("10.0.0.0/27", 20).prefixlen == 27


def test_fixed_macs_are_unicast_local_and_distinct():
    macs = {plan.mac_address("gflab", r, i) for r in (0, 1) for i in range(1, 9)} | {plan.mac_address("gflab", 2)}
    assert len(macs) == 17
    assert all(m.startswith("02:") for m in macs)
    assert plan.mac_address("gflab", 0, 1) != plan.mac_address("other", 0, 1)


def test_stale_object_matching_is_exact_per_lab():
    nss = ["gf-gflab-node1", "gf-gflab-node12", "gf-gflab-test-node1", "gf-gflab-nodex", "other", "gf-gflab-node0"]
    assert plan.owned_netns("gflab", nss) == ["gf-gflab-node1", "gf-gflab-node12"]
    assert plan.owned_netns("gflab-test", nss) == ["gf-gflab-test-node1"]
    h = plan.name_hash("gflab")
    links = ["gf-gflab", "gf-gflab-test", f"gv{h}n1", f"gv{h}n10", "eth0", f"gv{plan.name_hash('x')}n1", "gf-gflab2"]
    assert plan.owned_links("gflab", links) == sorted(["gf-gflab", f"gv{h}n1", f"gv{h}n10"])
    assert plan.machine_node("gflab", "gf-gflab-node3") == "node3"
    assert plan.machine_node("gflab", "gf-gflab-test-node3") is None


def test_hosts_and_known_hosts_text():
    nodes = plan.node_plan("10.213.0.0/24", 2)
    hosts = plan.hosts_file(nodes)
    assert "10.213.0.11\tnode1\n" in hosts and "10.213.0.12\tnode2\n" in hosts
    assert "127.0.0.1\tlocalhost" in hosts
    kh = plan.known_hosts([(nodes[0], "ssh-ed25519 AAAAkey1 root@node1"), (nodes[1], "ssh-ed25519 AAAAkey2")])
    assert kh == "node1,10.213.0.11 ssh-ed25519 AAAAkey1\nnode2,10.213.0.12 ssh-ed25519 AAAAkey2\n"


def test_rootfs_cache_key():
    k = rootfs.cache_key("bookworm")
    assert k == rootfs.cache_key("bookworm", tuple(reversed(rootfs.PACKAGES)))
    assert k != rootfs.cache_key("trixie")
    assert k != rootfs.cache_key("bookworm", (*rootfs.PACKAGES, "vim"))
    assert len(k) == 16 and int(k, 16) >= 0


DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.invalid/debian
Suites: bookworm

Types: deb
URIs: https://mirror.invalid/debian-security/
Suites: bookworm-security
Components: main

Enabled: no
Types: deb
URIs: http://disabled.invalid/debian
Suites: bookworm
"""


def test_host_sources_deb822():
    m = sources.pick_mirrors(sources.parse_deb822(DEB822))
    assert m == sources.HostMirrors("http://mirror.invalid/debian", "https://mirror.invalid/debian-security")


def test_host_sources_one_line_and_security_fallback(tmp_path):
    apt = tmp_path / "etc/apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text(
        "# deb http://commented.invalid/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://local.invalid/pub/debian bookworm main contrib\n"
    )
    (apt / "sources.list.d/other.sources.disabled").write_text("Types: deb\nURIs: http://x.invalid\nSuites: bookworm\n")
    m = sources.host_mirrors(str(tmp_path))
    assert m.debian == "http://local.invalid/pub/debian"
    assert m.security == "http://local.invalid/pub/debian-security"
    with pytest.raises(sources.SourcesError):
        sources.host_mirrors(str(tmp_path / "nothing"))


def test_node_sources_and_mirror_conf_use_host_mirror():
    m = sources.HostMirrors("https://mirror.invalid/debian", "http://mirror.invalid/debian-security")
    text = sources.node_sources(m)
    assert "URIs: http://mirror.invalid/debian\n" in text  # nodes speak http to the proxy
    assert "Suites: bookworm bookworm-updates\n" in text and "Suites: bookworm-security\n" in text
    assert text.count("Components: main contrib non-free non-free-firmware") == 2
    conf = mirror.acng_conf("10.213.0.1", m, "/c", "/s/mirror")
    assert "BindAddress: 10.213.0.1" in conf and "Port: 3142" in conf and "ForceManaged: 1" in conf
    assert "Remap-gfdebian: /debian mirror.invalid/debian ; https://mirror.invalid/debian/" in conf
    assert "Remap-gfsecurity: /debian-security mirror.invalid/debian-security ; " in conf


def test_lab_state_json_roundtrip(tmp_path):
    st = LabState(
        name="gflab",
        subnet="10.213.0.0/24",
        bridge="gf-gflab",
        bridge_address="10.213.0.1",
        nodes=[NodeState("node1", "10.213.0.11")],
        ssh_key="/k",
        known_hosts="/kh",
        mirror_url="http://10.213.0.1:3142",
    )
    path = str(tmp_path / "lab.json")
    save_state(st, path)
    with open(path) as f:
        assert json.load(f)["nodes"] == [{"name": "node1", "address": "10.213.0.11", "os": "debian12"}]
    assert load_state(path) == st
    assert load_state(str(tmp_path / "none.json")) is None
    assert st.node("node1").address == "10.213.0.11"
    with pytest.raises(KeyError):
        st.node("node2")


def test_cli_refuses_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for args in (["up"], ["down"]):
        res = CliRunner().invoke(cli.app, args)
        assert res.exit_code == 1
        assert "needs root" in res.output


def test_missing_tools_name_the_package(monkeypatch):
    monkeypatch.setattr(system, "REQUIRED_TOOLS", {})
    with pytest.raises(system.LabError, match="apt-get install systemd-container"):
        system.require_tools({"systemd-nspawn-not-here": "systemd-container"})
    assert system.missing_tools({"sh": "dash"}) == {}


def test_cli_rejects_bad_name():
    res = CliRunner().invoke(cli.app, ["status", "--name", "Bad_Name"])
    assert res.exit_code == 2
    assert "invalid lab name" in res.output


class _Item:
    def __init__(self, marked: bool) -> None:
        self.marked, self.markers = marked, []

    def get_closest_marker(self, name):
        return object() if self.marked and name == "lab" else None

    def add_marker(self, marker):
        self.markers.append(marker)


def test_plugin_skips_lab_tests_without_root(monkeypatch):
    from gpuforge.lab import pytest_plugin

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "need root" in (pytest_plugin.lab_unavailable_reason() or "")
    lab_item, plain = _Item(True), _Item(False)
    pytest_plugin.pytest_collection_modifyitems(None, [lab_item, plain])  # type: ignore[arg-type]
    assert plain.markers == []
    (mark,) = lab_item.markers
    assert mark.name == "skip" and "need root" in mark.kwargs["reason"]


def test_plugin_names_missing_packages(monkeypatch):
    from gpuforge.lab import pytest_plugin

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pytest_plugin, "REQUIRED_TOOLS", {"systemd-nspawn-missing": "systemd-container"})
    assert "apt-get install systemd-container" in (pytest_plugin.lab_unavailable_reason() or "")


def test_lab_spec_fits_the_base_spec_to_a_lab() -> None:
    """`gpuforge lab spec`: addresses, key, known_hosts and the mirror come from the lab."""
    from pathlib import Path

    import yaml

    from gpuforge.lab.lab_record import LabState, NodeState
    from gpuforge.lab.spec import lab_spec_data
    from gpuforge.spec import parse_spec
    from tests import yaml_text

    state = LabState(
        name="other",
        subnet="10.213.7.0/24",
        bridge="gf-other",
        bridge_address="10.213.7.1",
        nodes=[NodeState(f"node{i}", f"10.213.7.{10 + i}") for i in range(1, 5)],
        ssh_key="/var/lib/gpuforge/lab/other/id_ed25519",
        known_hosts="/var/lib/gpuforge/lab/other/known_hosts",
        mirror_url="http://10.213.7.1:3142",
    )
    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "inventories" / "lab.yaml").read_text())
    data = lab_spec_data(base, state, {"workers": "node[2-4]"})
    spec = parse_spec(yaml_text.dump(data))
    assert spec.ssh.key == state.ssh_key and spec.sources.apt_proxy == "http://10.213.7.1:3142"
    assert data["node_groups"][1]["addresses"] == ["10.213.7.12", "10.213.7.13", "10.213.7.14"]
    with pytest.raises(ValueError, match="node5"):
        lab_spec_data(base, state, {"workers": "node[2-5]"})


@pytest.mark.parametrize("marker", ["lab_beside", "lab_vm"])
def test_a_lab_beside_test_that_uses_the_session_lab_is_refused_at_collection(tmp_path: Path, marker: str) -> None:
    """scripts/test.sh runs lab_beside and lab_vm tests beside the session lab's: one that took it would fight."""
    (tmp_path / "test_x.py").write_text(
        f"import pytest\n\n@pytest.mark.lab\n@pytest.mark.{marker}\ndef test_x(lab):\n    pass\n\n"
        f"@pytest.mark.lab\n@pytest.mark.{marker}\ndef test_fine():\n    pass\n"
    )
    markers = ["-o", "markers=lab\nlab_beside\nlab_vm", "-p", "gpuforge.lab.pytest_plugin", "-p", "no:cacheprovider"]
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", *markers, str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert cp.returncode == 4, cp.stdout + cp.stderr  # pytest's usage error
    assert f"marked {marker} but uses the session lab (fixture 'lab'): test_x.py::test_x" in cp.stdout + cp.stderr
    assert "test_fine" not in cp.stderr
