"""The rendered dnsmasq configuration, run by the installed dnsmasq in a network namespace of its own
and asked by a stdlib DHCP client from a second one, as a node's PXE firmware and then its iPXE would.

What dnsmasq 2.90 answers (read from its replies, not assumed):

* ``mode: dhcp``: a known MAC gets its fixed address and, as option 67, ``undionly.kpxe`` (client
  architecture 0, BIOS) or ``ipxe.efi`` (7, x86-64 UEFI); as iPXE (user class ``iPXE``) the HTTP URL of
  its own script; an unknown MAC gets an address of the range and no boot file;
* ``mode: proxy``: offers carry no address (yiaddr 0.0.0.0, option 60 ``PXEClient``); a known BIOS client
  gets a PXE boot menu with the BIOS item, and its boot-server request (port 4011) that item's file
  ``undionly.kpxe``; a known UEFI client's boot-server request gets ``ipxe.efi``; iPXE gets its script
  URL in the file field; an unknown MAC gets an offer with no menu item and no file (as iPXE: no script);
  but the boot server answers a request for the BIOS item from an unknown MAC too (the public iPXE
  binary: the pxe-service line's ``tag:known`` does not gate port 4011);
* TFTP serves the chainload binary (fetched with curl from the node's namespace).

Root, dnsmasq, ip and curl are needed (skipped with the reason otherwise); about 6 s in all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.render import pxe
from tests.provision import netns, specs

pytestmark = pytest.mark.skipif(netns.why_not() is not None, reason=netns.why_not() or "")

KNOWN, OTHER, UNKNOWN = specs.MACS["cpu1"], specs.MACS["cpu2"], "0c:c4:7a:00:00:99"
BIOS, UEFI = "0", "7"


def _served(mode: str, work: Path, suffix: str) -> Iterator[netns.BootNetwork]:
    with netns.boot_network(suffix) as net:
        server = {"interface": net.server_if, "tftp_root": str(work / "tftp")}
        spec = specs.parse(specs.spec_data(mode, server=server), work)
        conf = work / "dnsmasq.conf"
        conf.write_text(pxe.dnsmasq_conf(spec))
        netns.start_dnsmasq(net, conf, work)
        yield net


@pytest.fixture
def dhcp(work: Path) -> Iterator[netns.BootNetwork]:
    yield from _served("dhcp", work, os.urandom(4).hex())


@pytest.fixture
def proxy(work: Path) -> Iterator[netns.BootNetwork]:
    yield from _served("proxy", work, os.urandom(4).hex())


def test_dhcp_mode_gives_each_node_its_address_and_its_firmwares_ipxe(dhcp: netns.BootNetwork) -> None:
    bios = dhcp.client("discover", KNOWN, BIOS)
    uefi = dhcp.client("discover", OTHER, UEFI)
    assert bios is not None and uefi is not None
    assert (bios["type"], bios["yiaddr"], bios["bootfile"]) == ("OFFER", "10.99.0.11", "undionly.kpxe")
    assert (uefi["type"], uefi["yiaddr"], uefi["bootfile"]) == ("OFFER", "10.99.0.12", "ipxe.efi")
    assert bios["server_id"] == uefi["server_id"] == "10.99.0.1"


def test_dhcp_mode_gives_ipxe_its_nodes_script_and_an_unknown_mac_no_boot_file(dhcp: netns.BootNetwork) -> None:
    ipxe = dhcp.client("discover", OTHER, UEFI, "--ipxe")
    assert ipxe is not None
    assert (ipxe["yiaddr"], ipxe["bootfile"]) == ("10.99.0.12", "http://10.99.0.1:8080/ipxe/cpu2.ipxe")
    stranger = dhcp.client("discover", UNKNOWN, BIOS, wait=5.0)  # dnsmasq pings a range address first
    assert stranger is not None
    assert stranger["yiaddr"].startswith("10.99.0.1") and 100 <= int(stranger["yiaddr"].split(".")[3]) <= 150  # type: ignore[union-attr]
    assert (stranger["bootfile"], stranger["file"]) == ("", "")
    stranger_ipxe = dhcp.client("discover", UNKNOWN, BIOS, "--ipxe", wait=5.0)
    assert stranger_ipxe is not None and (stranger_ipxe["bootfile"], stranger_ipxe["file"]) == ("", "")


def test_tftp_serves_the_chainload_binary(dhcp: netns.BootNetwork) -> None:
    assert dhcp.in_client("ip", "addr", "add", "10.99.0.11/24", "dev", dhcp.client_if).returncode == 0
    got = dhcp.in_client("curl", "-sS", "--max-time", "5", "tftp://10.99.0.1/undionly.kpxe")
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"iPXE stand-in: undionly.kpxe\n"
    outside = dhcp.in_client("curl", "-sS", "--max-time", "5", "tftp://10.99.0.1/../dnsmasq.conf")
    assert outside.returncode != 0 and b"gpuforge" not in outside.stdout


def test_proxy_mode_offers_boot_information_only_to_known_macs(proxy: netns.BootNetwork) -> None:
    bios = proxy.client("discover", KNOWN, BIOS)
    stranger = proxy.client("discover", UNKNOWN, BIOS)
    assert bios is not None and stranger is not None
    assert (bios["yiaddr"], bios["vendor_class"]) == ("0.0.0.0", "PXEClient")
    assert bios["pxe_menu"] == [[32768, "x86 BIOS"]]
    assert (stranger["yiaddr"], stranger["pxe_menu"], stranger["file"], stranger["bootfile"]) == ("0.0.0.0", [], "", "")
    ipxe = proxy.client("discover", KNOWN, UEFI, "--ipxe")
    assert ipxe is not None
    assert (ipxe["yiaddr"], ipxe["file"]) == ("0.0.0.0", "http://10.99.0.1:8080/ipxe/cpu1.ipxe")
    stranger_ipxe = proxy.client("discover", UNKNOWN, UEFI, "--ipxe")
    assert stranger_ipxe is not None and (stranger_ipxe["file"], stranger_ipxe["bootfile"]) == ("", "")


def test_proxy_modes_boot_server_names_the_firmwares_ipxe(proxy: netns.BootNetwork) -> None:
    """The site's DHCP server gave the node 10.99.0.11; it asks dnsmasq's boot server (port 4011)."""
    assert proxy.in_client("ip", "addr", "add", "10.99.0.11/24", "dev", proxy.client_if).returncode == 0
    server = ("10.99.0.11", "10.99.0.1")
    bios = proxy.client("boot-server", *server, KNOWN, BIOS, "--item", "32768")
    uefi = proxy.client("boot-server", *server, OTHER, UEFI)
    stranger = proxy.client("boot-server", *server, UNKNOWN, BIOS, "--item", "32768")
    assert bios is not None and uefi is not None and stranger is not None
    assert (bios["type"], bios["file"]) == ("ACK", "undionly.kpxe")
    assert (uefi["type"], uefi["file"]) == ("ACK", "ipxe.efi")
    # dnsmasq's boot server answers a boot item without the "known" tag: an unknown MAC that asks for
    # the item anyway gets the (public) iPXE binary, never a node's script (see the proxy offer test)
    assert (stranger["type"], stranger["file"]) == ("ACK", "undionly.kpxe")


def test_nothing_is_left_after_the_network_even_when_the_test_fails(work: Path) -> None:
    spec = specs.parse(specs.spec_data("dhcp", server={"tftp_root": str(work / "tftp")}), work)
    kept: list[netns.BootNetwork] = []
    with pytest.raises(RuntimeError, match="the test failed here"), netns.boot_network(os.urandom(4).hex()) as net:
        kept.append(net)
        conf = work / "dnsmasq.conf"
        conf.write_text(pxe.dnsmasq_conf(spec).replace("interface=gfpxe0", f"interface={net.server_if}"))
        netns.start_dnsmasq(net, conf, work)
        assert netns.leftovers(net) == [net.server_ns, net.client_ns, f"dnsmasq pid {net.dnsmasq.pid}"]  # type: ignore[union-attr]
        raise RuntimeError("the test failed here")
    assert netns.leftovers(kept[0]) == []
