"""The messages a new user met (issue 47, "the operator's view" item 11), each with the exact hint:
the mistake named first, then what to write."""

from __future__ import annotations

import time

import pytest

from gpuforge.spec import SpecError, parse_spec
from gpuforge.validator.registry import UnknownCheck, match
from tests.spec.test_messages import SPEC

SLURM_ROLES = "controller, compute, login, accounting-db, monitoring, storage"
MIG = """\
mig:
  configs:
    inf:
      - devices: all
        mig_devices: {"1g.10gb": 7}
"""
DRIVER = "versions:\n  driver: {version: 580.105.08, flavor: open, source: nvidia}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "x.yaml")
    return [i.format("x.yaml") for i in info.value.issues]


def test_an_unquoted_hostlist_in_a_flow_mapping_is_told_to_be_quoted() -> None:
    text = SPEC.replace("{name: batch, nodes: ctl}", "{name: batch, nodes: gpu[01-02]-ib}")
    (line,) = problems(text)
    assert line.startswith("x.yaml:9: (top level): not valid YAML: did not find expected ',' or '}' at line 9")
    assert line.endswith(
        "hint: inside {...} or [...] an unquoted value ends at '[', so a hostlist there must be quoted: "
        "'gpu[01-02]-ib' (or write the mapping in block style, one key per line)"
    )
    assert "not closed" not in line


def test_a_bracket_left_open_still_gets_its_own_hint() -> None:
    (line,) = problems(SPEC.replace("[controller, accounting-db, compute]", "[controller, accounting-db, compute"))
    assert "hint: a '[' that is not closed with ']'" in line


def test_a_version_read_as_a_number_is_told_to_be_quoted() -> None:
    (line,) = problems(SPEC.replace("slurm:\n", "versions:\n  driver: {version: 580.173}\nslurm:\n"))
    assert line == (
        "x.yaml:8: versions.driver.version: Input should be a valid string (got 580.173); YAML reads an unquoted "
        '580.173 as a number: quote it, "580.173" (as a number, trailing zeros are lost: 12.10 reads as 12.1)'
    )


def test_a_host_name_refusal_says_what_a_host_name_may_contain() -> None:
    (line,) = problems(SPEC.replace("hosts: ctl1", "hosts: GPU_01"))
    assert line == (
        "x.yaml:4: node_groups[0].hosts: invalid host name 'GPU_01' in hostlist 'GPU_01': a host name is one DNS "
        "label: letters, digits and inner '-' only (no '_', '.' or spaces), 63 characters at most; it becomes a "
        "file name, an ssh argument and a Slurm NodeName"
    )


def test_roles_of_the_other_scheduler_list_the_allowed_ones() -> None:
    (line,) = problems(SPEC.replace("compute]", "compute, k8s-worker]"))
    assert line == (
        f"x.yaml:5: node_groups[0].roles: role(s) k8s-worker do not fit scheduler slurm; its roles: {SLURM_ROLES}"
    )


def test_accounting_without_its_node_suggests_turning_it_off() -> None:
    (line,) = problems(SPEC.replace("accounting-db, ", ""))
    assert line == (
        "x.yaml:7: slurm.accounting.enabled: accounting needs exactly one node with role accounting-db; found 0: "
        "give one node that role, or turn accounting off: slurm: {accounting: {enabled: false}}"
    )


def test_mig_on_a_gpu_without_mig_leads_with_that() -> None:
    """Ubuntu 24.04's Slurm has no NVML plugin gpuforge installs: that refusal no longer comes first."""
    gpu_group = (
        "  - name: gpu\n    hosts: gpu1\n    roles: [compute]\n    mig_config: inf\n"
        "    hardware: {sockets: 1, cores_per_socket: 4, threads_per_core: 1, real_memory_mb: 8000, "
        "gpu: {model: L40S, count: 2}}\n"
    )
    text = SPEC.replace("{name: t, scheduler: slurm}", "{name: t, scheduler: slurm, os: ubuntu24.04}")
    text = text.replace("slurm:\n", gpu_group + MIG + DRIVER + "slurm:\n", 1)
    found = problems(text)
    assert found[0].startswith(
        "x.yaml:10: node_groups[1].mig_config: L40S does not support MIG: drop mig_config from group 'gpu' "
        "(GPUs with MIG: A100-40GB, A100-80GB, H100-80GB,"
    )
    assert not [p for p in found if "AutoDetect=nvml" in p], found


@pytest.mark.parametrize(("scheduler", "meant"), [("slurm", "compute"), ("kubernetes", "k8s-worker")])
def test_a_role_word_of_other_tools_is_suggested_for_the_cluster_s_scheduler(scheduler: str, meant: str) -> None:
    text = SPEC.replace("scheduler: slurm", f"scheduler: {scheduler}").replace("compute]", "worker]")
    line = next(p for p in problems(text) if "roles[2]" in p)
    assert line.endswith(f"(got 'worker'); did you mean {meant!r}?")


def test_a_role_with_no_close_match_lists_the_scheduler_s_roles() -> None:
    line = next(p for p in problems(SPEC.replace("compute]", "zzzz]")) if "roles[2]" in p)
    assert line.endswith(f"(got 'zzzz'); scheduler slurm's roles: {SLURM_ROLES}")


@pytest.mark.parametrize(("token", "meant"), [("drvier", "driver"), ("driver.verison", "driver.version"),
                                              ("schedular", "scheduler")])  # fmt: skip
def test_an_unknown_check_gets_did_you_mean(token: str, meant: str) -> None:
    with pytest.raises(UnknownCheck) as info:
        match(token)
    assert str(info.value).startswith(f"unknown check {token!r}; did you mean {meant!r}? known: config.files, ")


def test_a_far_check_name_gets_no_guess() -> None:
    with pytest.raises(UnknownCheck) as info:
        match("zzzz")
    assert str(info.value).startswith("unknown check 'zzzz'; known: config.files, ")


def test_the_flow_hint_on_a_hostile_line_is_quick_and_short() -> None:
    """A value of 30,000 '[1]' after a name: the hint's value is cut to the quoted line's length."""
    started = time.perf_counter()
    (line,) = problems(SPEC.replace("{name: batch, nodes: ctl}", "{name: batch, nodes: x" + "[1]" * 30_000 + "}"))
    assert time.perf_counter() - started < 1.0
    assert "a hostlist there must be quoted: 'x" in line and len(line) < 1_000
