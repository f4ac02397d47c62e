"""``node_groups[].bmc.protocol``: ipmi is accepted without a TLS fingerprint, each protocol has its
own default port, and two nodes behind one IPMI BMC are told to get their own (no system_id hint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.spec import SpecError, parse_spec
from tests import yaml_text

FP = "ab" * 32


def spec_text(bmc: dict[str, object], hosts: str = "cpu[1-2]") -> str:
    data = {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "address_start": "192.0.2.10", "roles": ["controller", "accounting-db"]},
            {"name": "cpu", "hosts": hosts, "address_start": "192.0.2.21", "roles": ["compute"],
             "hardware": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 4000},
             "bmc": {"credentials_file": "bmc.cred", **bmc}},
        ],
        "slurm": {"partitions": [{"name": "batch", "nodes": "cpu"}]},
    }  # fmt: skip
    return yaml_text.dump(data, sort_keys=False)


@pytest.mark.parametrize(
    ("bmc", "port"),
    [
        ({"protocol": "ipmi", "address_start": "198.51.100.21"}, 623),
        ({"protocol": "ipmi", "address_start": "198.51.100.21", "port": 6230}, 6230),
        ({"address_start": "198.51.100.21", "tls_fingerprint": FP}, 443),
        ({"protocol": "redfish", "address_start": "198.51.100.21", "tls_fingerprint": FP, "port": 8443}, 8443),
    ],
)
def test_each_protocol_has_its_default_port(tmp_path: Path, bmc: dict[str, object], port: int) -> None:
    spec = parse_spec(spec_text(bmc), base_dir=tmp_path)
    section = spec.node_groups[1].bmc
    assert section is not None and section.service_port == port
    assert section.tls_fingerprint == (FP if "tls_fingerprint" in bmc else None)


def test_two_nodes_behind_one_ipmi_bmc_are_not_told_to_use_system_id(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec_text({"protocol": "ipmi", "addresses": ["198.51.100.21"] * 2}), base_dir=tmp_path)
    text = e.value.format()
    assert "BMC 198.51.100.21:623 (system default) is also cpu1's: give each node its own BMC" in text
    assert "system_id" not in text
