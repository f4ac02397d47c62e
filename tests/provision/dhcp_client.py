"""A minimal DHCP client (stdlib ``socket`` only) that sends one DHCPDISCOVER as a PXE firmware or iPXE
would and prints every answer it gets as JSON lines: run inside a network namespace by the dnsmasq test.

``python -m tests.provision.dhcp_client discover IFACE MAC ARCH [--ipxe] [--wait SECONDS]``: one
DISCOVER broadcast, the first answer to it printed (nothing when none comes within the wait).

``python -m tests.provision.dhcp_client boot-server IFACE CLIENT_IP SERVER MAC ARCH [--item TYPE]``: the
PXE boot-server REQUEST a firmware sends to port 4011 after a proxy-DHCP offer (PXE 2.1), with the
boot item of the offer's menu; its answer printed.

The DISCOVER carries the broadcast flag (so the server answers to 255.255.255.255: the client has no
address yet), option 60 ``PXEClient:Arch:<arch>:UNDI:002001`` and option 93 (RFC 4578), and with
``--ipxe`` option 77 ``iPXE`` (iPXE's user class, sent as a plain string as iPXE does).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import time

MAGIC = b"\x63\x82\x53\x63"
MESSAGE_TYPES = {1: "DISCOVER", 2: "OFFER", 3: "REQUEST", 5: "ACK", 6: "NAK"}


def option(code: int, value: bytes) -> bytes:
    return bytes([code, len(value)]) + value


def request(
    xid: int, mac: str, arch: int, ipxe: bool, kind: int = 1, ciaddr: str = "0.0.0.0", item: int | None = None
) -> bytes:
    """A BOOTP/DHCP message (RFC 2131 layout: 236 bytes of header, the magic cookie, options) of type
    ``kind`` (1 DISCOVER, 3 REQUEST); ``item``: a PXE boot item (option 43, sub-option 71, layer 0)."""
    chaddr = bytes.fromhex(mac.replace(":", "")).ljust(16, b"\0")
    head = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, xid, 0, 0x8000,
                       socket.inet_aton(ciaddr), b"\0" * 4, b"\0" * 4, b"\0" * 4, chaddr, b"", b"")  # fmt: skip
    opts = option(53, bytes([kind]))
    opts += option(60, f"PXEClient:Arch:{arch:05d}:UNDI:002001".encode())
    opts += option(93, struct.pack("!H", arch))
    opts += option(94, b"\x01\x02\x01")  # client network interface identifier (UNDI 2.1), as PXE sends
    opts += option(97, b"\x00" + bytes(range(16)))  # client machine identifier (a fixed GUID)
    if ipxe:
        opts += option(77, b"iPXE")
    if item is not None:
        opts += option(43, option(71, struct.pack("!HH", item, 0)) + b"\xff")
    opts += option(55, bytes([1, 3, 6, 43, 60, 66, 67, 97]))
    return head + MAGIC + opts + b"\xff"


def pxe_menu(vendor: bytes) -> list[tuple[int, str]]:
    """The boot menu (sub-option 9: type, length, text per item) of a PXE option 43."""
    subs: dict[int, bytes] = {}
    i = 0
    while i + 1 < len(vendor) and vendor[i] != 255:
        subs[vendor[i]] = vendor[i + 2 : i + 2 + vendor[i + 1]]
        i += 2 + vendor[i + 1]
    menu, raw = [], subs.get(9, b"")
    while len(raw) >= 3:
        kind, size = struct.unpack("!HB", raw[:3])
        menu.append((kind, raw[3 : 3 + size].decode(errors="replace")))
        raw = raw[3 + size :]
    return menu


def parse(packet: bytes) -> dict[str, object]:
    """The fields of a server's answer that the test reads."""
    (op, _htype, _hlen, _hops, xid, _secs, _flags, _ci, yi, si, _gi, chaddr, sname, file) = struct.unpack(
        "!BBBBIHH4s4s4s4s16s64s128s", packet[:236]
    )
    options: dict[int, bytes] = {}
    rest = packet[240:] if packet[236:240] == MAGIC else b""
    i = 0
    while i < len(rest) and rest[i] != 255:
        if rest[i] == 0:
            i += 1
            continue
        code, length = rest[i], rest[i + 1]
        options[code] = options.get(code, b"") + rest[i + 2 : i + 2 + length]
        i += 2 + length
    return {
        "op": op,
        "xid": xid,
        "type": MESSAGE_TYPES.get(options.get(53, b"\0")[0], "?"),
        "chaddr": chaddr[:6].hex(":"),
        "yiaddr": socket.inet_ntoa(yi),
        "siaddr": socket.inet_ntoa(si),
        "sname": sname.rstrip(b"\0").decode(errors="replace"),
        "file": file.rstrip(b"\0").decode(errors="replace"),
        "bootfile": options.get(67, b"").rstrip(b"\0").decode(errors="replace"),
        "server_id": socket.inet_ntoa(options[54]) if len(options.get(54, b"")) == 4 else "",
        "vendor_class": options.get(60, b"").decode(errors="replace"),
        "options": sorted(options),
        "pxe_menu": pxe_menu(options.get(43, b"")),
    }


def _socket(iface: str, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, iface.encode())
    sock.bind((address, 68))
    return sock


def first_answer(sock: socket.socket, xid: int, wait: float) -> dict[str, object] | None:
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(4096)
        except TimeoutError:
            return None
        answer = parse(data)
        if answer["op"] == 2 and answer["xid"] == xid:
            return {"from": peer[0], **answer}
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    disc = sub.add_parser("discover")
    disc.add_argument("iface")
    disc.add_argument("mac")
    disc.add_argument("arch", type=int)
    disc.add_argument("--ipxe", action="store_true")
    disc.add_argument("--wait", type=float, default=2.0)
    boot = sub.add_parser("boot-server")
    for name in ("iface", "client_ip", "server", "mac"):
        boot.add_argument(name)
    boot.add_argument("arch", type=int)
    boot.add_argument("--item", type=int)
    boot.add_argument("--wait", type=float, default=2.0)
    args = ap.parse_args()
    xid = int.from_bytes(os.urandom(4), "big")
    if args.command == "discover":
        sock = _socket(args.iface, "0.0.0.0")
        sock.sendto(request(xid, args.mac, args.arch, args.ipxe), ("255.255.255.255", 67))
    else:
        sock = _socket(args.iface, args.client_ip)
        packet = request(xid, args.mac, args.arch, False, kind=3, ciaddr=args.client_ip, item=args.item)
        sock.sendto(packet, (args.server, 4011))
    answer = first_answer(sock, xid, args.wait)
    if answer is not None:
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
