"""Site Ansible steps without a cluster: the inventory, the play, the segments, the events (issue 15)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.extensions import ansible_run
from gpuforge.extensions.ansible_inventory import UNSAFE_KEY, ansible_inventory, target_groups, unwrapped
from gpuforge.extensions.ansible_run import AnsibleMissing, outcome_from_events, role_play
from gpuforge.orchestrate.site_steps import segments, step_nodes
from gpuforge.spec import parse_spec
from gpuforge.spec.extensions import AnsibleStep
from gpuforge.spec.roles import LAYER_ORDER
from tests import yaml_text
from tests.conftest import REPO, run_cli

EXAMPLE = REPO / "inventories" / "lab.yaml"


def _spec(**site: Any) -> Any:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["site"] = site
    return parse_spec(yaml_text.dump(data))


def test_layer_names_of_steps_are_the_layer_order() -> None:
    from typing import get_args

    from gpuforge.spec.extensions import LayerName

    assert get_args(LayerName) == LAYER_ORDER


def test_inventory_has_every_node_groups_and_strict_host_keys() -> None:
    spec = _spec()
    marked = ansible_inventory(spec)["all"]
    # Every string variable reaches Ansible marked unsafe (never templated); ports stay numbers.
    assert marked["hosts"]["node2"]["ansible_host"] == {UNSAFE_KEY: "10.213.0.12"}
    assert marked["hosts"]["node2"]["ansible_port"] == 22
    assert marked["vars"]["gpuforge_cluster"] == {UNSAFE_KEY: spec.cluster.name}
    inv = unwrapped(marked)
    assert inv["hosts"]["node2"] == {
        "ansible_host": "10.213.0.12",
        "ansible_port": 22,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": "/var/lib/gpuforge/lab/gflab/id_ed25519",
    }
    assert inv["vars"]["ansible_ssh_common_args"] == (
        "-o StrictHostKeyChecking=yes -o BatchMode=yes -o IdentitiesOnly=yes "
        "-o UserKnownHostsFile=/var/lib/gpuforge/lab/gflab/known_hosts"
    )
    assert sorted(inv["children"]["role_compute"]["hosts"]) == ["node1", "node2", "node3"]
    assert sorted(inv["children"]["role_accounting_db"]["hosts"]) == ["node1"]
    assert sorted(inv["children"]["group_workers"]["hosts"]) == ["node2", "node3"]
    limited = ansible_inventory(spec, ["node3"])["all"]
    assert list(limited["hosts"]) == ["node3"] and "group_ctl" not in limited["children"]


def test_targets_become_groups_and_nodes() -> None:
    spec = _spec()
    assert target_groups(spec, []) == ["all"]
    assert target_groups(spec, ["workers", "controller"]) == ["group_workers", "role_controller"]
    step = AnsibleStep(name="x", role="r", targets=["workers"])
    assert step_nodes(spec, step) == {"node2", "node3"}
    assert step_nodes(spec, AnsibleStep(name="x", role="r")) == {"node1", "node2", "node3"}


def test_role_play_runs_the_role_by_its_path_on_the_target_groups(tmp_path: Path) -> None:
    spec = _spec()
    step = AnsibleStep(name="ldap", role="roles/ldap", targets=["compute"], vars={"uri": "ldaps://x"})
    play = role_play(spec, step, tmp_path)
    assert play == [
        {
            "name": "gpuforge site step ldap",
            "hosts": "role_compute",
            "gather_facts": True,
            "become": False,  # root already: no sudo needed on the nodes
            "roles": [{"role": {UNSAFE_KEY: str(tmp_path / "roles" / "ldap")}}],
        }
    ]


def test_segments_cut_the_layer_order_after_each_step() -> None:
    a = AnsibleStep(name="a", role="r", after="base")
    b = AnsibleStep(name="b", role="r", after="base")
    c = AnsibleStep(name="c", role="r", after="slurm")
    cut = segments([a, b, c])
    assert [(layers, [s.name for s in steps]) for layers, steps in cut] == [
        (("base",), ["a", "b"]),
        (("packages", "storage", "munge", "nvidia", "fabric", "kubernetes", "slurm"), ["c"]),
        (("monitoring", "health"), []),
    ]
    assert [layer for layers, _ in cut for layer in layers] == list(LAYER_ORDER)
    assert segments([AnsibleStep(name="z", role="r")]) == [(LAYER_ORDER, [AnsibleStep(name="z", role="r")])]


def _ev(kind: str, host: str, task: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, "task": task, **data}}


def test_outcome_from_events_per_host() -> None:
    events = [
        _ev("runner_on_ok", "n1", "Gathering Facts", res={}),
        _ev("runner_on_ok", "n1", "site file", res={"changed": True, "diff": {"before": "a\n", "after": "b\n"}}),
        _ev("runner_on_ok", "n2", "site file", res={"changed": False}),
        _ev("runner_on_failed", "n2", "optional", ignore_errors=True, res={"msg": "ignored"}),
        _ev("runner_on_failed", "n2", "refuse", res={"msg": "non-zero return code", "stderr": "x\nsysctl: denied"}),
        _ev("runner_on_failed", "n2", "later", res={"msg": "second failure"}),
        _ev("runner_on_unreachable", "n3", "Gathering Facts", res={"msg": "Host key verification failed."}),
        _ev("runner_on_ok", "other", "site file", res={"changed": True}),  # not a host of this step
        {"event": "playbook_on_stats", "event_data": {}},
    ]
    out = outcome_from_events(events, ["n1", "n2", "n3"])
    assert out["n1"].changed == ["site file"] and out["n1"].ok == 2 and out["n1"].failed is None
    assert out["n1"].diffs == ["site file:\n--- before\n+++ after\n@@ -1 +1 @@\n-a\n+b\n"]
    assert out["n2"].changed == [] and out["n2"].failed == "refuse: non-zero return code: sysctl: denied"
    assert out["n3"].failed == "unreachable: Host key verification failed."
    assert set(out) == {"n1", "n2", "n3"}


def test_prepared_diffs_are_shown_as_ansible_gives_them() -> None:
    out = outcome_from_events([_ev("runner_on_ok", "n1", "t", res={"diff": [{"prepared": "+line\n"}]})], ["n1"])
    assert out["n1"].diffs == ["t:\n+line\n"]


def test_without_ansible_runner_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ansible_runner", None)  # import raises ImportError
    with pytest.raises(AnsibleMissing, match=r"pip install 'gpuforge\[ansible\]'"):
        ansible_run.ansible_playbook_binary()


def test_inventory_command_prints_the_ansible_inventory() -> None:
    cp = run_cli("inventory", str(EXAMPLE), "--format", "ansible")
    assert cp.returncode == 0, cp.stderr
    inv = json.loads(cp.stdout)
    assert inv == ansible_inventory(_spec())
    cp = run_cli("inventory", str(EXAMPLE), "--format", "ansible", "--limit", "workers")
    assert sorted(json.loads(cp.stdout)["all"]["hosts"]) == ["node2", "node3"]


def test_each_step_ends_with_a_milestone_line() -> None:
    from gpuforge.extensions.ansible_run import HostOutcome, StepOutcome
    from gpuforge.orchestrate.site_steps import step_summary
    from gpuforge.progress import Milestone

    outcome = StepOutcome(
        "sssd",
        {
            "node1": HostOutcome(ok=5, changed=["sssd.conf"]),
            "node2": HostOutcome(ok=5),
            "node3": HostOutcome(ok=2, failed="start sssd: failed"),
        },
    )
    line = step_summary(outcome, check=False)
    assert isinstance(line, Milestone)
    assert line == "ansible sssd: 2 node(s) ok (1 changed), 1 failed (node3)"
    assert step_summary(outcome, check=True) == "ansible sssd: 2 node(s) ok (1 would change), 1 failed (node3)"
