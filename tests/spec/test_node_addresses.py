"""A group's ``address_start`` counts inside the node network: a /24 unless it gives the prefix."""

from __future__ import annotations

from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.nodes import address_range_problem

SPEC = """
cluster: {name: t, scheduler: slurm}
node_groups:
  - {name: ctl, hosts: ctl1, address_start: 10.0.1.10, roles: [controller, accounting-db]}
  - name: gpu
    hosts: gpu[01-64]
    address_start: 10.0.1.250/22
    roles: [compute]
    hardware: {sockets: 2, cores_per_socket: 56, threads_per_core: 2, real_memory_mb: 2000000}
slurm:
  partitions:
    - {name: batch, nodes: gpu}
"""


def test_a_prefix_lets_a_range_cross_a_24_and_addresses_carry_no_prefix() -> None:
    spec = parse_spec(SPEC)
    addresses = {n.name: n.address for n in resolve_nodes(spec)}
    assert addresses["gpu01"] == "10.0.1.250" and addresses["gpu07"] == "10.0.2.0"
    assert addresses["gpu64"] == "10.0.2.57"


def test_the_range_must_miss_the_network_and_broadcast_addresses() -> None:
    assert address_range_problem("10.0.1.1", 254) is None
    assert address_range_problem("10.0.1.1", 255) == (
        "255 host(s) from 10.0.1.1 to 10.0.1.255 do not fit the host addresses of 10.0.1.0/24 (10.0.1.1 to "
        "10.0.1.254); a node network larger than a /24: give its prefix (10.0.1.1/22, say)"
    )
    assert address_range_problem("10.0.0.0/22", 1) == (
        "1 host(s) from 10.0.0.0 to 10.0.0.0 do not fit the host addresses of 10.0.0.0/22 (10.0.0.1 to 10.0.3.254)"
    )
    assert address_range_problem("255.255.255.250", 10) is not None  # never past the last IPv4 address
    assert address_range_problem(None, 10) is None
