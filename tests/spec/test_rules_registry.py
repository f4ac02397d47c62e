"""The rule registry (``gpuforge/spec/rules.py``): every rule once, in the order issues are reported.

The rules live in modules named for what they rule on; ``check_rules`` reports their issues in the
order of ``RULES``, which is the order ``gpuforge check`` prints them in. Moving a rule to another
module must not move its issues.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuforge.spec.model import Spec
from gpuforge.spec.rules import RULES, check_rules

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"

#: (module, function) of each rule, in the order ``check_rules`` runs them.
ORDER = [
    ("rules", "unique_names_and_addresses"),
    ("slurm_rules", "scheduler_sections_and_roles"),
    ("slurm_rules", "slurm_rules"),
    ("slurm_rules", "distro_slurm_cgroup"),
    ("slurm_rules", "slurm_gpu_rules"),
    ("gpu_rules", "gpu_driver_rules"),
    ("gpu_rules", "platform_rules"),
    ("gpu_rules", "dcgm_rules"),
    ("gpu_rules", "mig_rules"),
    ("slurm_rules", "topology_rules"),
    ("k8s_rules", "kubernetes_rules"),
    ("k8s_rules", "kubeadm_rules"),
    ("k8s_rules", "gpu_operator_rules"),
    ("site_rules", "source_rules"),
    ("site_rules", "site_rules"),
    ("acceptance_rules", "acceptance_rules"),
    ("storage_rules", "storage_rules"),
    ("storage_rules", "shared_state_rules"),
    ("k8s_rules", "kubernetes_day2_rules"),
    ("fabric_rules", "fabric_rules"),
    ("network_operator_rules", "network_operator_rules"),
    ("hardware_rules", "hardware_issues"),
    ("slurm_mix_rules", "slurm_release_rules"),
    ("slurm_parameters", "slurm_parameter_rules"),
    ("slurm_build_rules", "slurm_build_rules"),
    ("bmc_rules", "bmc_rules"),
    ("provisioning_rules", "provisioning_rules"),
]


def test_rules_are_registered_once_in_report_order() -> None:
    registered = [(fn.__module__.removeprefix("gpuforge.spec."), fn.__name__) for fn in RULES]
    assert registered == ORDER


def _broken_h100() -> dict[str, Any]:
    """The H100 example with one problem for each of four rule modules, interleaved in RULES."""
    data: dict[str, Any] = yaml.safe_load((INVENTORIES / "slurm-h100.yaml").read_text())
    groups = data["node_groups"]
    groups[1]["name"] = groups[0]["name"]  # rules: a group name twice
    groups[0]["hardware"]["nvswitch"] = True  # gpu_rules: NVSwitch without GPUs
    groups[4]["leaf_switch"]["leaf9"] = groups[4]["leaf_switch"].pop("leaf2")  # slurm_rules: topology
    data["sources"] = {"mode": "offline"}  # site_rules: no bundle
    data["slurm"]["partitions"].append(dict(data["slurm"]["partitions"][0]))  # slurm_rules: partitions
    return data


def test_issues_come_in_rule_order_across_modules() -> None:
    """slurm_rules, gpu_rules, slurm_rules again (topology), site_rules: the order of RULES, not of modules."""
    assert check_rules(Spec.model_validate(yaml.safe_load((INVENTORIES / "slurm-h100.yaml").read_text()))) == []
    issues = check_rules(Spec.model_validate(_broken_h100()))
    assert [(i.loc, i.message) for i in issues] == [
        (("node_groups", 1, "name"), "group name 'ctl' is used by more than one group"),
        (("slurm", "partitions"), "partition 'gpu' is defined more than once"),
        (("slurm", "partitions"), "only one partition may be default; found gpu, gpu"),
        (("node_groups", 0, "hardware", "nvswitch"), "NVSwitch without GPUs: set hardware.gpu"),
        (("node_groups", 4, "leaf_switch"), "leaf switch 'leaf9' is not in topology.switches"),
        (("sources", "bundle_dir"), "mode offline needs bundle_dir (made by 'gpuforge bundle')"),
        (
            ("sources", "bundle_fingerprint"),
            "mode offline needs bundle_fingerprint: the signing key fingerprint 'gpuforge bundle' printed "
            "(without it a changed bundle could re-sign itself); 'gpuforge bundle SPEC -o DIR' builds from this "
            "spec without it and ends with the line to add: 'pin it: sources.bundle_fingerprint: <40 hex digits>'",
        ),
    ]
