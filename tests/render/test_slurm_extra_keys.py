"""extra_config may not set what gpuforge renders: the refused keys are the rendered keys, exactly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpuforge.render.slurm import slurm_conf
from gpuforge.spec import SpecError, load_spec, parse_spec
from gpuforge.spec.types import RENDERED_SLURM_KEYS, SLURM_OBJECT_KEYS
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "slurm" / "slurm.conf.j2"


def test_refused_keys_are_every_key_the_template_can_render() -> None:
    template_keys = set(re.findall(r"^([A-Za-z]+)=", TEMPLATE.read_text(), re.M))
    assert template_keys - SLURM_OBJECT_KEYS == RENDERED_SLURM_KEYS


def test_rendered_examples_use_only_known_keys() -> None:
    for path in sorted((REPO / "inventories").glob("*.yaml")):
        spec = load_spec(path)
        if spec.slurm is None:
            continue
        keys = {line.split("=", 1)[0] for line in slurm_conf(spec).splitlines() if re.match(r"[A-Za-z]+=", line)}
        assert keys <= RENDERED_SLURM_KEYS | SLURM_OBJECT_KEYS, (path.name, keys - RENDERED_SLURM_KEYS)


def test_an_allowed_extra_key_lands_as_one_line() -> None:
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["slurm"]["extra_config"] = {"MaxJobCount": "20000", "MessageTimeout": "30"}
    conf = slurm_conf(parse_spec(yaml_text.dump(data))).splitlines()
    assert "MaxJobCount=20000" in conf and "MessageTimeout=30" in conf
    data["slurm"]["extra_config"] = {"SlurmctldHost": "evil"}
    try:
        parse_spec(yaml_text.dump(data))
    except SpecError as e:
        assert "SlurmctldHost is rendered from the spec" in e.format()
    else:
        raise AssertionError("SlurmctldHost accepted in extra_config")


#: slurm.conf(5), DESCRIPTION: "The contents of the file are case insensitive except for the names of
#: nodes and partitions." So ``nodename=`` declares a node as ``NodeName=`` does, and
#: ``healthcheckprogram=`` sets the program slurmd runs as root.
CASE_VARIANTS = [
    "nodename",
    "partitionname",
    "slurmctldhost",
    "healthcheckprogram",
    "NODENAME",
    "nodeSet",
    "include",
    "INCLUDE",
    "SlurmCtldHost",
]


@pytest.mark.parametrize("key", CASE_VARIANTS)
def test_refused_keys_are_refused_in_any_case(key: str) -> None:
    """The reproducer: these keys got past a case-sensitive deny-list."""
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["slurm"]["extra_config"] = {key: "evil"}
    with pytest.raises(SpecError) as info:
        parse_spec(yaml_text.dump(data))
    assert any(i.path == "slurm.extra_config" for i in info.value.issues), info.value.format()


def test_credentials_use_the_current_parameter_name() -> None:
    """CryptoType=crypto/munge was renamed CredType=cred/munge in Slurm 19.05 (slurm_releases
    'slurm-credtype'); every Slurm gpuforge installs reads the new name."""
    conf = slurm_conf(load_spec(REPO / "inventories/slurm-h100.yaml")).splitlines()
    assert "CredType=cred/munge" in conf
    assert not [line for line in conf if line.startswith("CryptoType")]
