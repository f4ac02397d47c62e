"""Review item 2: no value gpuforge hands to Ansible is templated on the control host.

A role's directory name, the spec's folder, and extra vars reach ``ansible-runner`` for real
(``run_step``); the node is 127.0.0.1 on a closed port, so each run fails as unreachable after the
play is loaded (the moment Ansible templates the role's path). A ``lookup('pipe', ...)`` that ran
would leave a file behind.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.extensions.ansible_inventory import UNSAFE_KEY
from gpuforge.extensions.ansible_run import role_play, run_step
from gpuforge.spec import parse_spec
from gpuforge.spec.extensions import AnsibleStep
from tests import yaml_text
from tests.conftest import REPO, run_cli

pytest.importorskip("ansible_runner")
LOOKUP = "{{ lookup('pipe', 'cd ~ && touch MARK') }}"  # no '/' (one folder name), no '$' (Ansible expands it)


def local_spec(spec_dir: Path) -> Any:
    """The lab spec with node1 at 127.0.0.1 on a closed port (Ansible gives up at once)."""
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["ssh"].update(port=1, known_hosts=str(spec_dir / "known_hosts"))
    data["node_groups"][0]["address_start"] = "127.0.0.1"
    return parse_spec(yaml_text.dump(data))


def make_role(where: Path) -> None:
    (where / "tasks").mkdir(parents=True)
    (where / "tasks" / "main.yml").write_text("- debug: {msg: \"{{ site_value | default('') }}\"}\n")


@pytest.mark.parametrize("hostile", ["role", "folder", "vars"])
def test_no_lookup_runs_on_the_control_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> None:
    mark = tmp_path / "MARK"  # where the lookup's `cd ~` (HOME) would touch it
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "tmp"))
    spec_dir = tmp_path / (LOOKUP if hostile == "folder" else "site")
    role = f"roles/{LOOKUP}" if hostile == "role" else "roles/ldap"
    make_role(spec_dir / role)
    values: dict[str, Any] = {"site_value": LOOKUP} if hostile == "vars" else {}
    # model_construct: as if the spec's own checks had been passed (the folder's name is not checked)
    step = AnsibleStep.model_construct(name="ldap", role=role, playbook=None, targets=[], vars=values, become=True)
    outcome = run_step(local_spec(spec_dir), spec_dir, step, ["node1"])
    assert not mark.exists(), "Ansible ran a lookup from a value gpuforge gave it"
    assert "unreachable" in (outcome.hosts["node1"].failed or ""), outcome
    shutil.rmtree(tmp_path / "tmp", ignore_errors=True)


def test_the_play_marks_the_role_path_unsafe(tmp_path: Path) -> None:
    step = AnsibleStep(name="ldap", role="roles/ldap")
    [play] = role_play(local_spec(tmp_path), step, tmp_path)
    assert play["roles"] == [{"role": {UNSAFE_KEY: str(tmp_path / "roles" / "ldap")}}]


@pytest.mark.parametrize("delimiter", ["{{", "{%", "{#"])
@pytest.mark.parametrize("field", ["role", "playbook"])
def test_check_refuses_jinja_in_a_site_path(tmp_path: Path, delimiter: str, field: str) -> None:
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["site"] = {"ansible": [{"name": "ldap", field: f"roles/a{delimiter} x"}]}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml_text.dump(data))
    cp = run_cli("check", str(spec))
    assert cp.returncode == 2 and f"site.ansible[0].{field}" in cp.stdout + cp.stderr, cp.stdout + cp.stderr
    assert "Jinja" in cp.stdout + cp.stderr and "Traceback" not in cp.stderr


def test_extra_vars_reach_a_task_as_the_plain_text_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The extra vars file as ``run_step`` has ansible-runner write it (``unsafe``): a task sees the
    value as a string, the lookup in it printed, never run."""
    import json
    import subprocess
    import sys

    from gpuforge.extensions.ansible_inventory import unsafe

    (tmp_path / "vars.json").write_text(json.dumps(unsafe({"site_value": LOOKUP, "n": 3})))
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n"
        '    - debug: {msg: "v={{ site_value }} n={{ n }} type={{ site_value | type_debug }}"}\n'
    )
    env = {**os.environ, "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1"}
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    cp = subprocess.run([playbook, "-i", "localhost,", "-e", "@vars.json", "play.yml"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"v={LOOKUP} n=3 type=str" in cp.stdout and not (tmp_path / "MARK").exists()
