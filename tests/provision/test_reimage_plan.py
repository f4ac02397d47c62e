"""The reimage plan as data (gpuforge/provision/reimage.py) and the host-key helpers' parsing: specs
in, exact issues, batches, steps and owners out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuforge.orchestrate.slurm_drain import NodeHold
from gpuforge.provision import hostkeys, reimage
from gpuforge.spec.cluster import Cluster
from tests.provision import specs

BMC = {"addresses": ["10.98.0.11", "10.98.0.12"], "credentials_file": "bmc.cred", "protocol": "ipmi"}


def cluster(folder: Path, **edits: object) -> Cluster:
    data = specs.edited(specs.spec_data(), "node_groups", 1, "bmc", value=BMC)
    for key, value in edits.items():
        data[key] = value
    path = specs.write(data, folder)
    return Cluster.of(specs.parse(data, folder), path)


def test_input_issues_name_the_field_of_each_problem(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    assert reimage.input_issues(c.spec, ["cpu1", "cpu2"]) == []
    assert reimage.input_issues(c.spec, ["ctl1"]) == [
        "node_groups[0].boot: ctl1 has no boot entry (boot section with its MAC in macs)",
        "node_groups[0].bmc: ctl1 has no BMC: gpuforge cannot set its boot or power",
        "node_groups[0].roles: ctl1 is not a Slurm compute node: only those are reimaged",
    ]


def test_batches_follow_rollout_batch_size(tmp_path: Path) -> None:
    assert reimage.batches(cluster(tmp_path).spec, ["cpu1", "cpu2"]) == [["cpu1"], ["cpu2"]]
    wide = cluster(tmp_path, rollout={"batch_size": 2})
    assert reimage.batches(wide.spec, ["cpu1", "cpu2"]) == [["cpu1", "cpu2"]]


def test_the_steps_of_a_node_in_order(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    steps = reimage.node_steps(c, "cpu2", 600)
    assert [s.kind for s in steps] == list(reimage.StepKind)
    assert steps[0].text.startswith("drain through ctl1 (Reason='gpuforge: reimage';")
    assert "up to 3600 s" in steps[0].text  # rollout.drain_timeout's default
    assert steps[3].text.startswith("wait up to 600 s until SSH (10.99.0.12:22) answers")
    assert steps[4].text.endswith("then, if gpuforge drained it, resume it: scontrol update NodeName=cpu2 State=RESUME")


def test_an_operator_s_hold_is_theirs_and_an_earlier_reimage_s_is_ours() -> None:
    holds = {
        "a": NodeHold("a", held=False),
        "b": NodeHold("b", held=True, reason="gpuforge: reimage"),
        "c": NodeHold("c", held=True, reason="bad DIMM"),
        "d": NodeHold("d", held=True, reason="gpuforge: rolling change"),  # a rollout's: not ours to resume
    }
    assert reimage.split_holds(holds) == (["a", "b"], ["c", "d"])


def test_known_hosts_lines_are_parsed_as_type_and_key() -> None:
    text = "# 127.0.0.1:22 SSH-2.0-OpenSSH_9.2\n[127.0.0.1]:2222 ssh-ed25519 AAAAC3Nz host\n|1|abc= ssh-rsa AAAAB3\n\n"
    assert hostkeys.parse_keys(text) == {"ssh-ed25519 AAAAC3Nz", "ssh-rsa AAAAB3"}
    assert hostkeys.destination("10.0.0.5", 22) == "10.0.0.5"
    assert hostkeys.destination("10.0.0.5", 2222) == "[10.0.0.5]:2222"


def test_recorded_keys_are_read_by_ssh_keygen_hashed_or_not(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("[10.0.0.5]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOmR plain\n")
    assert hostkeys.recorded(known, "10.0.0.5", 2222) == {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOmR"}
    assert hostkeys.recorded(known, "10.0.0.5", 22) == set()
    assert hostkeys.recorded(tmp_path / "absent", "10.0.0.5", 2222) == set()
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)  # hash the names
    assert known.read_text().startswith("|1|")
    assert hostkeys.recorded(known, "10.0.0.5", 2222) == {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOmR"}
