"""The ``provisioning`` section and ``node_groups[].boot``: values typed for dnsmasq's lines, iPXE's
script and the kernel command line (nothing can add a line, an option or a path), and the rules that
relate them (one MAC per node, addresses in the boot network, a range clear of the nodes), each
refusal naming its field and node; ``gpuforge check`` exits 2 on them without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.spec import SpecError
from tests.provision import specs

REPO = Path(__file__).resolve().parents[2]
BOOT = ("node_groups", 1, "boot")
SERVER = ("provisioning", "server")


def problems(data: dict[str, Any], folder: Path) -> list[str]:
    with pytest.raises(SpecError) as e:
        specs.parse(data, folder)
    return [i.format() for i in e.value.issues]


def test_the_example_parses_and_a_mac_is_stored_lower_case_with_colons(tmp_path: Path) -> None:
    data = specs.edited(specs.spec_data(), *BOOT, "macs", "cpu1", value="0C-C4-7A-00-00-0A")
    spec = specs.parse(data, tmp_path)
    boot = spec.node_groups[1].boot
    assert boot is not None and boot.macs == {"cpu1": "0c:c4:7a:00:00:0a", "cpu2": "0c:c4:7a:00:00:02"}
    assert spec.provisioning is not None and spec.provisioning.server.http_port == 8080
    assert spec.provisioning.server.tftp_root == "/usr/lib/ipxe"


BAD_VALUES: list[tuple[tuple[str | int, ...], object, str]] = [
    ((*BOOT, "macs", "cpu1"), "0c:c4:7a:00:00:01\ndhcp-boot=x",
     "node_groups[1].boot.macs.cpu1: '0c:c4:7a:00:00:01\\ndhcp-boot=x' is not a MAC address"),
    ((*BOOT, "macs", "cpu1"), "0c:c4:7a:00:00:01,10.99.0.5",
     "node_groups[1].boot.macs.cpu1: '0c:c4:7a:00:00:01,10.99.0.5' is not a MAC address"),
    ((*BOOT, "macs", "cpu1"), "0c:c4:7a-00:00:01", "node_groups[1].boot.macs.cpu1: '0c:c4:7a-00:00:01' is not a MAC"),
    ((*BOOT, "macs", "cpu1"), "01:00:5e:00:00:01",
     "node_groups[1].boot.macs.cpu1: '01:00:5e:00:00:01' is a multicast or all-zero address"),
    ((*BOOT, "nfs_export"), "/srv/cpu init=/bin/sh",
     "node_groups[1].boot.nfs_export: '/srv/cpu init=/bin/sh' is not an absolute path of plain segments below /"),
    ((*BOOT, "nfs_export"), "/srv/../etc", "node_groups[1].boot.nfs_export: '/srv/../etc' is not an absolute path"),
    ((*BOOT, "nfs_export"), "/srv/cpu,rw", "node_groups[1].boot.nfs_export: '/srv/cpu,rw' is not an absolute path"),
    ((*BOOT, "mode"), "ramdisk", "node_groups[1].boot.mode: Input should be 'stateless' or 'disk'"),
    ((*SERVER, "interface"), "eth0 x", "provisioning.server.interface: 'eth0 x' is not an interface name"),
    ((*SERVER, "interface"), "a-very-long-name0", "provisioning.server.interface: 'a-very-long-name0' is not an"),
    ((*SERVER, "address"), "10.99.0.1", "provisioning.server.address: '10.99.0.1': give the boot network's prefix"),
    ((*SERVER, "address"), "10.99.0.0/24", "provisioning.server.address: '10.99.0.0/24' is the network or broadcast"),
    ((*SERVER, "tftp_root"), "/srv/tftp,eth1", "provisioning.server.tftp_root: '/srv/tftp,eth1' is not an absolute"),
    ((*SERVER, "tftp_root"), "srv/tftp", "provisioning.server.tftp_root: 'srv/tftp' is not an absolute path"),
    ((*SERVER, "tftp_root"), "/", "provisioning.server.tftp_root: '/' is not an absolute path of plain segments below"),
    ((*SERVER, "http_port"), 0, "provisioning.server.http_port: Input should be greater than or equal to 1"),
    ((*SERVER, "mode"), "relay", "provisioning.server.mode: Input should be 'dhcp' or 'proxy'"),
    ((*SERVER, "range", "end"), "10.99.0.99",
     "provisioning.server.range: range start 10.99.0.100 is after its end 10.99.0.99"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "message"), BAD_VALUES)
def test_a_value_that_is_not_one_token_in_its_sink_is_refused_naming_its_field(
    tmp_path: Path, path: tuple[str | int, ...], value: object, message: str
) -> None:
    found = problems(specs.edited(specs.spec_data(), *path, value=value), tmp_path)
    assert len(found) == 1 and found[0].startswith(message), found


@pytest.mark.parametrize(
    "root", ["/dev/sda1 init=/bin/sh", "/dev/../etc/shadow", "LABEL=root fs", "UUID=$(reboot)", "root"]
)
def test_a_disk_root_is_one_kernel_parameter(tmp_path: Path, root: str) -> None:
    data = specs.edited(specs.spec_data(), *BOOT, value={"mode": "disk", "image": "images/cpu",
                                                         "macs": specs.MACS, "root": root})  # fmt: skip
    found = problems(data, tmp_path)
    assert found == [f"node_groups[1].boot.root: {root!r} is not a root device: /dev/<name>, UUID=<hex "
                     "and '-'>, PARTUUID=<hex and '-'> or LABEL=<letters, digits, '_', '.', '-'>"]  # fmt: skip


RULES: list[tuple[dict[str, Any], list[str]]] = [
    (specs.edited(specs.spec_data(), *BOOT, "macs", "cpu2", value="0c:c4:7a:00:00:01"),
     ["node_groups[1].boot.macs (node cpu2): MAC 0c:c4:7a:00:00:01 is also cpu1's: one boot NIC per node"]),
    (specs.edited(specs.spec_data(), "node_groups", 1, "address_start", value="10.98.0.11"),
     ["node_groups[1].address_start (node cpu1): address 10.98.0.11 is outside the boot network 10.99.0.0/24",
      "node_groups[1].address_start (node cpu2): address 10.98.0.12 is outside the boot network 10.99.0.0/24"]),
    (specs.edited(specs.spec_data(), *SERVER, "range", value={"start": "10.99.0.10", "end": "10.99.0.11"}),
     ["provisioning.server.range (node ctl1): the range 10.99.0.10-10.99.0.11 holds node ctl1's address "
      "10.99.0.10: keep the nodes' addresses out of it",
      "provisioning.server.range (node cpu1): the range 10.99.0.10-10.99.0.11 holds node cpu1's address "
      "10.99.0.11: keep the nodes' addresses out of it"]),
    (specs.edited(specs.spec_data(), *SERVER, "range", value={"start": "10.99.0.200", "end": "10.99.1.5"}),
     ["provisioning.server.range.end: 10.99.1.5 is not a host address of the boot network 10.99.0.0/24 "
      "(10.99.0.1 to 10.99.0.254)"]),
    (specs.edited(specs.spec_data(), *SERVER, "range", value={"start": "10.99.0.1", "end": "10.99.0.5"}),
     ["provisioning.server.range: the range holds the server's own address 10.99.0.1/24"]),
    (specs.edited(specs.spec_data("proxy"), *SERVER, "range", value={"start": "10.99.0.200", "end": "10.99.0.210"}),
     ["provisioning.server.range: mode proxy hands out no addresses (the site's DHCP server does): remove range"]),
    (specs.edited(specs.spec_data(), *SERVER, "address", value="10.99.0.11/24"),
     ["node_groups[1].address_start (node cpu1): address 10.99.0.11 is the provisioning server's own"]),
    (specs.edited(specs.spec_data(), *BOOT, "macs", value={"cpu1": "0c:c4:7a:00:00:01", "cpu9": "0c:c4:7a:00:00:09"}),
     ["node_groups[1].boot.macs (node cpu2): no boot MAC: every node of the group needs one",
      "node_groups[1].boot.macs: cpu9 is not a node of group cpu (cpu[1-2])"]),
    (specs.edited(specs.spec_data(), *BOOT, "nfs_export", value=None),
     ["node_groups[1].boot.nfs_export: required for mode stateless"]),
    (specs.edited(specs.spec_data(), *BOOT, "mode", value="disk"),
     ["node_groups[1].boot.root: required for mode disk",
      "node_groups[1].boot.nfs_export: means nothing to mode disk: remove it"]),
    ({k: v for k, v in specs.spec_data().items() if k != "provisioning"},
     ["node_groups[1].boot: needs the provisioning section (the server the nodes boot from)"]),
]  # fmt: skip


@pytest.mark.parametrize(("data", "messages"), RULES)
def test_what_the_sections_say_together_is_checked_naming_the_nodes(
    tmp_path: Path, data: dict[str, Any], messages: list[str]
) -> None:
    assert problems(data, tmp_path) == messages


def test_check_exits_2_naming_the_node_without_a_traceback(tmp_path: Path) -> None:
    path = specs.write(specs.edited(specs.spec_data(), *BOOT, "macs", "cpu2", value="0C:C4:7A:00:00:01"), tmp_path)
    done = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "node_groups[1].boot.macs (node cpu2): MAC 0c:c4:7a:00:00:01 is also cpu1's" in done.stderr
    assert "Traceback" not in done.stderr
