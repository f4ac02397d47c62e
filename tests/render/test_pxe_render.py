"""dnsmasq's configuration and the nodes' iPXE scripts: the spec in, the exact lines out; every dnsmasq
option and iPXE command written is one the cited tables name."""

from __future__ import annotations

from pathlib import Path

from gpuforge.image import bootable
from gpuforge.render import pxe
from gpuforge.spec.pxe_facts import DNSMASQ_OPTIONS, FIRMWARES, IPXE_COMMANDS, KERNEL_ARGS
from tests.provision import specs

HEAD = [
    "# gpuforge provision: network boot of cluster t (generated: do not edit)",
    "port=0",
    "interface=gfpxe0",
    "bind-interfaces",
    "log-dhcp",
]
MATCHES = [
    "dhcp-match=set:gf-bios,option:client-arch,0",
    "dhcp-match=set:gf-efi64,option:client-arch,7",
    "dhcp-match=set:gf-efi64,option:client-arch,9",
    "dhcp-match=set:gf-efi-arm64,option:client-arch,11",
    "dhcp-userclass=set:gf-ipxe,iPXE",
    "dhcp-match=set:gf-ipxe,175",
    "enable-tftp",
    "tftp-root=/usr/lib/ipxe",
]
SCRIPTS = [
    "dhcp-boot=tag:gf-ipxe,tag:gf-node-cpu1,http://10.99.0.1:8080/ipxe/cpu1.ipxe",
    "dhcp-boot=tag:gf-ipxe,tag:gf-node-cpu2,http://10.99.0.1:8080/ipxe/cpu2.ipxe",
]


def test_dhcp_mode_gives_fixed_addresses_a_range_and_the_chainload(tmp_path: Path) -> None:
    conf = pxe.dnsmasq_conf(specs.parse(specs.spec_data("dhcp"), tmp_path))
    assert conf.splitlines() == [
        *HEAD,
        "dhcp-range=10.99.0.100,10.99.0.150,255.255.255.0",
        "dhcp-host=0c:c4:7a:00:00:01,set:gf-node-cpu1,10.99.0.11,cpu1",
        "dhcp-host=0c:c4:7a:00:00:02,set:gf-node-cpu2,10.99.0.12,cpu2",
        *MATCHES,
        "dhcp-boot=tag:known,tag:gf-bios,tag:!gf-ipxe,undionly.kpxe",
        "dhcp-boot=tag:known,tag:gf-efi64,tag:!gf-ipxe,ipxe.efi",
        "dhcp-boot=tag:known,tag:gf-efi-arm64,tag:!gf-ipxe,ipxe-arm64.efi",
        *SCRIPTS,
    ]


def test_dhcp_mode_without_a_range_serves_only_the_spec_s_nodes(tmp_path: Path) -> None:
    data = specs.spec_data("dhcp")
    del data["provisioning"]["server"]["range"]
    conf = pxe.dnsmasq_conf(specs.parse(data, tmp_path))
    assert "dhcp-range=10.99.0.0,static,255.255.255.0" in conf.splitlines()


def test_proxy_mode_gives_no_address_and_offers_pxe_services(tmp_path: Path) -> None:
    conf = pxe.dnsmasq_conf(specs.parse(specs.spec_data("proxy", server={"http_port": 80}), tmp_path))
    assert conf.splitlines() == [
        *HEAD,
        "dhcp-range=10.99.0.0,proxy,255.255.255.0",
        "dhcp-host=0c:c4:7a:00:00:01,set:gf-node-cpu1,cpu1",
        "dhcp-host=0c:c4:7a:00:00:02,set:gf-node-cpu2,cpu2",
        *MATCHES,
        'pxe-service=tag:known,tag:!gf-ipxe,x86PC,"x86 BIOS",undionly.kpxe',
        'pxe-service=tag:known,tag:!gf-ipxe,x86-64_EFI,"x86-64 UEFI",ipxe.efi',
        'pxe-service=tag:known,tag:!gf-ipxe,ARM64_EFI,"ARM64 UEFI",ipxe-arm64.efi',
        "dhcp-boot=tag:gf-ipxe,tag:gf-node-cpu1,http://10.99.0.1:80/ipxe/cpu1.ipxe",
        "dhcp-boot=tag:gf-ipxe,tag:gf-node-cpu2,http://10.99.0.1:80/ipxe/cpu2.ipxe",
    ]


def test_a_stateless_node_boots_the_group_image_with_its_root_on_nfs(tmp_path: Path) -> None:
    files = pxe.rendered_files(specs.parse(specs.spec_data(), tmp_path))
    assert sorted(files) == ["dnsmasq.conf", "http/ipxe/cpu1.ipxe", "http/ipxe/cpu2.ipxe"]
    assert files["http/ipxe/cpu1.ipxe"].splitlines() == [
        "#!ipxe",
        "kernel http://10.99.0.1:8080/images/cpu/vmlinuz root=/dev/nfs nfsroot=10.99.0.1:/srv/gpuforge/cpu ip=dhcp",
        "initrd http://10.99.0.1:8080/images/cpu/initrd.img",
        "boot",
    ]


def test_a_disk_node_boots_the_group_image_with_its_root_on_its_disk(tmp_path: Path) -> None:
    boot = {"mode": "disk", "root": "LABEL=gpuforge-root", "nfs_export": None}
    files = pxe.rendered_files(specs.parse(specs.spec_data(boot=boot), tmp_path))
    assert files["http/ipxe/cpu2.ipxe"].splitlines() == [
        "#!ipxe",
        "kernel http://10.99.0.1:8080/images/cpu/vmlinuz root=LABEL=gpuforge-root",
        "initrd http://10.99.0.1:8080/images/cpu/initrd.img",
        "boot",
    ]


def test_a_limit_renders_only_its_nodes(tmp_path: Path) -> None:
    spec = specs.parse(specs.spec_data(), tmp_path)
    files = pxe.rendered_files(spec, ["cpu2"])
    assert sorted(files) == ["dnsmasq.conf", "http/ipxe/cpu2.ipxe"]
    assert "cpu1" not in files["dnsmasq.conf"] and "set:gf-node-cpu2,10.99.0.12,cpu2" in files["dnsmasq.conf"]


def test_every_option_and_command_written_is_a_cited_one(tmp_path: Path) -> None:
    for mode in ("dhcp", "proxy"):
        files = pxe.rendered_files(specs.parse(specs.spec_data(mode), tmp_path))
        options = {line.partition("=")[0] for line in files["dnsmasq.conf"].splitlines() if line[:1] != "#"}
        assert options <= set(DNSMASQ_OPTIONS), options - set(DNSMASQ_OPTIONS)
        words = {line.split()[0] for line in files["http/ipxe/cpu1.ipxe"].splitlines()}
        assert words == set(IPXE_COMMANDS)
    for row in FIRMWARES:
        assert row.sources and all(c.where.startswith("https://") and c.section for c in row.sources)
    for args in KERNEL_ARGS.values():
        assert args.source.section


def test_the_script_loads_the_files_the_image_build_writes() -> None:
    assert (pxe.KERNEL_FILE, pxe.INITRD_FILE) == (bootable.KERNEL_FILE, bootable.INITRD_FILE)
