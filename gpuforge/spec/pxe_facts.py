"""Upstream facts the network boot rests on, each with where it is written: dnsmasq's options, iPXE's
script commands, the PXE client-architecture values (DHCP option 93), Debian's iPXE binaries and the
kernel parameters of the two boot modes.

Invariants: the renderers (:mod:`gpuforge.render.dnsmasq`, :mod:`gpuforge.render.ipxe`) write only
options and commands named here; a firmware difference (BIOS, x86-64 UEFI, ARM64 UEFI) is a row of
:data:`FIRMWARES`, not a branch.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.citation import Citation
from gpuforge.spec.provisioning import BootMode

_DNSMASQ = "dnsmasq(8), dnsmasq 2.90"
#: The manual as the installed package ships it (the version the namespace test runs).
_MAN = "Debian bookworm dnsmasq-base 2.90: /usr/share/man/man8/dnsmasq.8.gz (man 8 dnsmasq)"


def _man(section: str) -> Citation:
    return Citation(_DNSMASQ, _MAN, section)


#: Every dnsmasq option the rendered configuration uses, and what its manual says of it.
DNSMASQ_OPTIONS: dict[str, Citation] = {
    "port": _man(
        "-p, --port=<port>: Listen on <port> instead of the standard DNS port (53). Setting this to zero "
        "completely disables DNS function, leaving only DHCP and/or TFTP."
    ),
    "interface": _man("-i, --interface=<interface name>: Listen only on the specified interface(s)."),
    "bind-interfaces": _man(
        "-z, --bind-interfaces: This option forces dnsmasq to really bind only the interfaces it is listening on. "
        "[...] Setting this option also enables multiple instances of dnsmasq which provide DHCP service to run "
        "in the same machine."
    ),
    "log-dhcp": _man(
        "--log-dhcp: Extra logging for DHCP: log all the options sent to DHCP clients and the tags used to "
        "determine them."
    ),
    "dhcp-range": _man(
        "-F, --dhcp-range=[tag:<tag>[,tag:<tag>],][set:<tag>,]<start-addr>[,<end-addr>|<mode>[,<netmask>"
        "[,<broadcast>]]][,<lease time>] [...] The optional <mode> keyword may be static which tells dnsmasq to "
        "enable DHCP for the network specified, but not to dynamically allocate IP addresses: only hosts which "
        "have static addresses given via --dhcp-host or from /etc/ethers will be served. [...] For IPv4, the "
        "<mode> may be proxy in which case dnsmasq will provide proxy-DHCP on the specified subnet."
    ),
    "dhcp-host": _man(
        "-G, --dhcp-host=[<hwaddr>][,id:<client_id>|*][,set:<tag>][,tag:<tag>][,<ipaddr>][,<hostname>]"
        "[,<lease_time>][,ignore]: This allows a machine with a particular hardware address to be always "
        'allocated the same hostname, IP address and lease time. [...] the tag "known" is set.'
    ),
    "dhcp-match": _man(
        "--dhcp-match=set:<tag>,<option number>|option:<option name>|vi-encap:<enterprise>[,<value>]: [...] "
        '--dhcp-match=set:efi-ia32,option:client-arch,6 will set the tag "efi-ia32" if the the number 6 '
        "appears in the list of architectures sent by the client in option 93. (See RFC 4578 for details.)"
    ),
    "dhcp-userclass": _man(
        "-j, --dhcp-userclass=set:<tag>,<user-class>: Map from a user-class string to a tag (with substring "
        "matching, like vendor classes)."
    ),
    "enable-tftp": _man(
        "--enable-tftp[=<interface>[,<interface>]]: Enable the TFTP server function. This is deliberately "
        "limited to that needed to net-boot a client. Only reading is allowed"
    ),
    "tftp-root": _man(
        "--tftp-root=<directory>[,<interface>]: Look for files to transfer using TFTP relative to the given "
        'directory. When this is set, TFTP paths which include ".." are rejected'
    ),
    "dhcp-boot": _man(
        "-M, --dhcp-boot=[tag:<tag>,]<filename>,[<servername>[,<server address>|<tftp_servername>]]: (IPv4 only) "
        "Set BOOTP options to be returned by the DHCP server. [...] If dnsmasq is providing a TFTP service (see "
        "--enable-tftp ) then only the filename is required here to enable network booting."
    ),
    "pxe-service": _man(
        "--pxe-service=[tag:<tag>,]<CSA>,<menu text>[,<basename>|<bootservicetype>][,<server address>|"
        "<server_name>]: [...] Alternatively, the basename may be a filename, complete with suffix, in which "
        'case no layer suffix is added. [...] Dnsmasq supports PXE "proxy-DHCP", in this case another DHCP '
        "server on the network is responsible for allocating IP addresses, and dnsmasq simply provides the "
        "information given in --pxe-prompt and --pxe-service to allow netbooting."
    ),
    "tags": _man(
        'The tag system works as follows: [...] one from any matching --dhcp-host (and "known" or '
        "\"known-othernet\" if a --dhcp-host matches) [...] The prefix '!' on a tag means 'not'"
    ),
}

_IPXE = "iPXE documentation"

#: The iPXE script commands each node's script uses.
IPXE_COMMANDS: dict[str, Citation] = {
    "#!ipxe": Citation(
        _IPXE, "https://ipxe.org/scripting",
        "An iPXE script is a plain text file starting with the magic line #!ipxe and containing a sequence of "
        "iPXE commands.",
    ),
    "kernel": Citation(
        _IPXE, "https://ipxe.org/cmd/kernel",
        "kernel [--name <name>] [--timeout <timeout>] <uri|image> [<arguments>...]: Download and select an "
        "executable image from the specified URI. [...] Any remaining arguments will be passed directly to the "
        "image.",
    ),
    "initrd": Citation(
        _IPXE, "https://ipxe.org/cmd/initrd",
        "imgfetch [...] or initrd [--name <name>] [--timeout <timeout>] <uri> [<arguments>...]: Download an "
        "image from the specified URI.",
    ),
    "boot": Citation(
        _IPXE, "https://ipxe.org/cmd/chain",
        "chain [...] or boot [...]: If no image is explicitly specified, iPXE will boot the currently-selected "
        "image",
    ),
}  # fmt: skip

#: How a DHCP server tells iPXE from the firmware's PXE: iPXE's user class (option 77).
IPXE_USER_CLASS = "iPXE"
IPXE_USER_CLASS_CITATION = Citation(
    _IPXE, "https://ipxe.org/cfg/user-class",
    "If no user class has been explicitly specified, iPXE will send the user class \"iPXE\". [...] The DHCP user "
    "class can be used to avoid the problem of an infinite loop when chainloading iPXE from an existing PXE ROM.",
)  # fmt: skip
#: iPXE's own DHCP option (175), the other mark of an iPXE client in iPXE's dnsmasq note.
IPXE_OPTION = 175
IPXE_OPTION_CITATION = Citation(
    _IPXE, "https://ipxe.org/appnote/premature",
    "dhcp-boot=undionly.kpxe dhcp-match=set:iPXE,175 dhcp-boot=tag:iPXE,http://my.web.server/real_boot_script.php",
)  # fmt: skip

_ARCH_TABLE = Citation(
    _IPXE, "https://ipxe.org/cfg/platform",
    "DHCP option 93 Client architecture: 0 Standard PC BIOS, 6 32-bit x86 EFI, 7 64-bit x86 EFI, "
    "9 64-bit x86 EFI (obsolete), 10 32-bit ARM EFI, 11 64-bit ARM EFI",
)  # fmt: skip
_ARCH_ERRATUM = Citation(
    "ipxe/ipxe commit af9afd0 ([dhcp] Fix definitions for x86_64 and EFI BC client architectures)",
    "https://github.com/ipxe/ipxe/commit/af9afd0a86aeac1eed28b5028c3de669515fc7fc",
    "RFC4578 section 2.1 defines type 7 as \"EFI BC\" and type 9 as \"EFI x86-64\"; the IANA registry [...] has "
    "these values erroneously swapped. [...] As of March 2016, RFC4578 has been modified by an errata to match "
    "the values as recorded in the IANA registry.",
)  # fmt: skip
_DEBIAN_BOOKWORM = Citation(
    "Debian bookworm, ipxe (architecture all): file list",
    "https://packages.debian.org/bookworm/all/ipxe/filelist",
    "/boot/ipxe.efi /boot/ipxe.lkrn /etc/grub.d/20_ipxe /usr/lib/ipxe/ipxe.efi /usr/lib/ipxe/ipxe.iso "
    "/usr/lib/ipxe/ipxe.lkrn /usr/lib/ipxe/ipxe.pxe /usr/lib/ipxe/snponly.efi /usr/lib/ipxe/undionly.kkpxe "
    "/usr/lib/ipxe/undionly.kpxe",
)
_DEBIAN_TRIXIE = Citation(
    "Debian trixie, ipxe (architecture all): file list",
    "https://packages.debian.org/trixie/all/ipxe/filelist",
    "/usr/lib/ipxe/ipxe-amd64.efi /usr/lib/ipxe/ipxe-arm64.efi [...] /usr/lib/ipxe/ipxe.efi [...] "
    "/usr/lib/ipxe/undionly.kpxe",
)


@dataclass(frozen=True)
class Firmware:
    """A kind of PXE client firmware: the option-93 values it sends, the dnsmasq tag gpuforge gives it,
    the iPXE binary it chainloads (a file of Debian's ipxe package, in ``/usr/lib/ipxe``) and dnsmasq's
    client system type name for ``pxe-service`` (proxy mode)."""

    name: str
    client_arch: tuple[int, ...]
    tag: str
    binary: str
    pxe_csa: str
    sources: tuple[Citation, ...]


#: The firmwares the boot server chainloads iPXE for (the ARM64 binary is in Debian trixie, not bookworm).
FIRMWARES: tuple[Firmware, ...] = (
    Firmware("x86 BIOS", (0,), "gf-bios", "undionly.kpxe", "x86PC", (_ARCH_TABLE, _DEBIAN_BOOKWORM, _DEBIAN_TRIXIE)),
    Firmware(
        "x86-64 UEFI", (7, 9), "gf-efi64", "ipxe.efi", "x86-64_EFI",
        (_ARCH_TABLE, _ARCH_ERRATUM, _DEBIAN_BOOKWORM, _DEBIAN_TRIXIE),
    ),
    Firmware("ARM64 UEFI", (11,), "gf-efi-arm64", "ipxe-arm64.efi", "ARM64_EFI", (_ARCH_TABLE, _DEBIAN_TRIXIE)),
)  # fmt: skip

#: The dnsmasq tag of an iPXE client (its user class, or its option 175).
IPXE_TAG = "gf-ipxe"
#: The prefix of each node's own tag (set by its ``dhcp-host``), so no node name meets a tag of ours.
NODE_TAG_PREFIX = "gf-node-"

_NFSROOT = Citation(
    "Linux kernel documentation: Mounting the root filesystem via NFS (nfsroot)",
    "https://github.com/torvalds/linux/blob/master/Documentation/admin-guide/nfs/nfsroot.rst",
    "root=/dev/nfs: This is necessary to enable the pseudo-NFS-device. [...] nfsroot=[<server-ip>:]<root-dir>"
    "[,<nfs-options>] [...] The <autoconf> parameter can appear alone as the value to the ip parameter [...] "
    'The most common way to use this is "ip=dhcp". [...] rdinit=<executable file> [...] If the specified file '
    "exists and the kernel can execute it, root filesystem related kernel command line parameters, including "
    "'nfsroot=', are ignored.",
)
_ROOT = Citation(
    "initramfs-tools(7) (initramfs-tools-core 0.140ubuntu13.4, Ubuntu jammy)",
    "https://manpages.ubuntu.com/manpages/jammy/man7/initramfs-tools.7.html",
    "The traditional root=/dev/sda1 style device specification is allowed. If a label is used, as in "
    "root=LABEL=rootPart the initrd will search all available devices for a filesystem with the appropriate "
    "label [...] root=UUID=uuidnumber will mount the partition with that UUID as the root filesystem.",
)  # fmt: skip


@dataclass(frozen=True)
class KernelArgs:
    """The kernel command line of a boot mode: parameters with ``{server}``, ``{nfs_export}`` and
    ``{root}`` filled from the spec (each value typed to be one parameter: no spaces)."""

    params: tuple[str, ...]
    source: Citation


KERNEL_ARGS: dict[BootMode, KernelArgs] = {
    BootMode.STATELESS: KernelArgs(("root=/dev/nfs", "nfsroot={server}:{nfs_export}", "ip=dhcp"), _NFSROOT),
    BootMode.DISK: KernelArgs(("root={root}",), _ROOT),
}

_HTTPCORE = "https://github.com/ipxe/ipxe/blob/c8cae7cc178776dbb42cbe1cdaecbac99ddc060d/src/net/tcp/httpcore.c"

#: What iPXE's HTTP client asks for when a script's ``kernel`` or ``initrd`` fetches a URI, so all the
#: boot server's HTTP side must answer: a GET of the exact path (no HEAD, no Range), an HTTP/1.0 answer
#: closing the connection, with the file's length.
IPXE_HTTP: dict[str, Citation] = {
    "GET, no Range": Citation(
        "ipxe/ipxe src/net/tcp/httpcore.c (commit c8cae7c)", _HTTPCORE,
        "static int http_open_get_uri ( struct interface *xfer, struct uri *uri ) { return http_open ( xfer, "
        "&http_get, uri, NULL, NULL ); } [...] int http_open_uri ( struct interface *xfer, struct uri *uri ) { "
        "/* Open GET/POST URI as applicable */ if ( uri->params ) { return http_open_post_uri ( xfer, uri ); } "
        "else { return http_open_get_uri ( xfer, uri ); } } [...] static int http_format_range ( ... ) { /* "
        "Construct range, if applicable */ if ( http->request.range.len ) { [...] } else { return 0; } }",
    ),
    "HEAD and Range: the HTTP block device only (sanboot)": Citation(
        "ipxe/ipxe src/net/tcp/httpblock.c (commit b6f9e4b)",
        "https://github.com/ipxe/ipxe/blob/b6f9e4bab082c3b7a9b587ef64109069fba59baa/src/net/tcp/httpblock.c",
        "Hyper Text Transfer Protocol (HTTP) block device [...] /* Start a range request to retrieve the "
        "block(s) */ [...] /* Start a HEAD request to retrieve the capacity */",
    ),
    "HTTP/1.0: no keep-alive": Citation(
        "ipxe/ipxe src/net/tcp/httpcore.c (commit c8cae7c)", _HTTPCORE,
        "/* Keepalive is enabled by default for anything newer than HTTP/1.0 */ [...] } else if ( strncmp ( "
        "vernum, \"1.0\", 3 ) == 0 ) { /* HTTP/1.0 : keepalive not enabled by default */",
    ),
    "Content-Length": Citation(
        "google/netboot commit 3aa7695 (pixiecore: set Content-Length when serving the kernel/initrd)",
        "https://github.com/google/netboot/commit/3aa769557c8c8a5e606543f0d66b868f1314eef1",
        "iPXE appears to have *really* poor performance (orders of magnitude worse) if it doesn't know the "
        "length of the kernel/initrds that it's downloading.",
    ),
}  # fmt: skip
