"""``gpuforge provision SPEC --serve`` run for real: the command in the server's network namespace
(the installed dnsmasq 2.90 and the HTTP server as its children), a node's namespace asking it as the
node's iPXE would: DHCP for its script URL (the stdlib DHCP client), then the script over HTTP, then
the kernel and initrd the script names (the stdlib HTTP client).

What is checked, from the answers (not assumed):

* the DHCP answer's URL serves exactly the rendered script, and the script's ``kernel`` and
  ``initrd`` URLs exactly the image's files (SHA-256, Content-Length);
* only the mapped paths are served: ``/``, folders, ``..`` steps, a query string, a percent-encoded
  name and the render folder's own files are 404; HEAD is 501 (iPXE sends only GET);
* HTTP does not tell the nodes apart: a client at cpu1's address gets cpu2's script too (the scripts
  hold no secret; an address is no identity on the boot network; docs/bare-metal.md says so);
* SIGTERM stops both children: the command exits 0, dnsmasq and the HTTP server are gone and nothing
  listens in the namespace any more; when dnsmasq dies (SIGKILL) the command stops the HTTP server
  and exits 1 naming dnsmasq with its last output, and its private folder is removed;
* a port in use, a missing interface and missing image files exit 2 naming the field, nothing started.

Root, dnsmasq, ip, curl and ss are needed (skipped with the reason otherwise); about 15 s in all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.render import pxe
from tests.provision import netns, serving, specs

WHY_NOT = netns.why_not() or (None if shutil.which("ss") else "ss is not installed")
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

KNOWN, UEFI = specs.MACS["cpu1"], "7"
SERVER, PORT = "10.99.0.1", 8080


def _data(work: Path, interface: str) -> dict[str, Any]:
    return specs.spec_data("dhcp", server={"interface": interface, "tftp_root": str(work / "tftp")})


def _image(work: Path) -> dict[str, bytes]:
    """The group's image folder (images/cpu beside the spec) with a kernel and an initrd of random bytes."""
    folder = work / "images" / "cpu"
    folder.mkdir(parents=True)
    files = {pxe.KERNEL_FILE: os.urandom(300_000), pxe.INITRD_FILE: os.urandom(120_000)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _spec(work: Path, interface: str) -> Path:
    return specs.write(_data(work, interface), work)


@pytest.fixture
def net() -> Iterator[netns.BootNetwork]:
    with netns.boot_network(os.urandom(4).hex()) as network:
        yield network


@pytest.fixture
def image(work: Path) -> dict[str, bytes]:
    return _image(work)


@pytest.fixture
def running(work: Path, net: netns.BootNetwork, image: dict[str, bytes]) -> Iterator[serving.Serve]:
    """The serve command on the spec, rendering into work/boot, up and serving."""
    spec = _spec(work, net.server_if)
    serve = serving.start(net, spec, "--render", str(work / "boot"))
    try:
        serve.wait_serving()
        yield serve
    finally:
        serving.stop(serve)


def _script_urls(script: str) -> list[str]:
    """The URL paths of a script's kernel and initrd lines."""
    prefix = f"http://{SERVER}:{PORT}"
    urls = [line.split()[1] for line in script.splitlines() if line.split()[:1] in (["kernel"], ["initrd"])]
    assert all(u.startswith(prefix) for u in urls), urls
    return [u.removeprefix(prefix) for u in urls]


def test_a_node_gets_its_script_and_image_over_dhcp_and_http_and_sigterm_stops_it(
    running: serving.Serve, net: netns.BootNetwork, work: Path, image: dict[str, bytes]
) -> None:
    offer = net.client("discover", KNOWN, UEFI, "--ipxe")
    assert offer is not None and offer["yiaddr"] == "10.99.0.11"
    assert offer["bootfile"] == f"http://{SERVER}:{PORT}/ipxe/cpu1.ipxe"
    assert net.in_client("ip", "addr", "add", "10.99.0.11/24", "dev", net.client_if).returncode == 0
    (script,) = serving.fetch(net, SERVER, PORT, str(offer["bootfile"]).removeprefix(f"http://{SERVER}:{PORT}"))
    rendered = pxe.rendered_files(specs.parse(_data(work, net.server_if), work))
    assert script["status"] == 200
    assert script["text"] == rendered["http/ipxe/cpu1.ipxe"] == (work / "boot/http/ipxe/cpu1.ipxe").read_text()
    kernel, initrd = serving.fetch(net, SERVER, PORT, *_script_urls(str(script["text"])))
    for got, name in ((kernel, pxe.KERNEL_FILE), (initrd, pxe.INITRD_FILE)):
        assert (got["status"], got["sha256"]) == (200, hashlib.sha256(image[name]).hexdigest())
        assert got["content_length"] == str(len(image[name]))
    (other,) = serving.fetch(net, SERVER, PORT, "/ipxe/cpu2.ipxe")
    assert (other["status"], other["text"]) == (200, rendered["http/ipxe/cpu2.ipxe"])
    refused = ["/", "/ipxe/", "/ipxe", "/images/cpu/", "/ipxe/../dnsmasq.conf", "/images/cpu/../../cluster.yaml",
               "/ipxe/cpu1.ipxe?x=1", "/ipxe/%63pu1.ipxe", "/dnsmasq.conf", "/http/ipxe/cpu1.ipxe", "/ipxe/cpu9.ipxe",
               "/images/cpu/disk.qcow2", "//ipxe/cpu1.ipxe"]  # fmt: skip
    assert [(r["path"], r["status"]) for r in serving.fetch(net, SERVER, PORT, *refused)] == [(p, 404) for p in refused]
    (head,) = serving.fetch(net, SERVER, PORT, "/ipxe/cpu1.ipxe", method="HEAD")
    assert head["status"] == 501
    assert running.files == 4  # two scripts, one group's kernel and initrd
    _sigterm_stops_both_and_frees_the_ports(running, net)


def _sigterm_stops_both_and_frees_the_ports(running: serving.Serve, net: netns.BootNetwork) -> None:
    listening = serving.listening(net)
    assert f"{SERVER}:{PORT}" in listening and ":67 " in listening and ":69 " in listening
    assert serving.alive(running.dnsmasq_pid) and serving.alive(running.http_pid)
    running.proc.send_signal(signal.SIGTERM)
    assert running.finish() == 0, running.output()
    assert running.stdout[-1] == "stopped: dnsmasq and the HTTP server have exited\n"
    assert not serving.alive(running.dnsmasq_pid) and not serving.alive(running.http_pid)
    assert serving.listening(net) == ""
    log = running.output()
    assert "[dnsmasq] dnsmasq-dhcp" in log and "DHCPOFFER(" in log and "exiting on receipt of SIGTERM" in log
    assert '"GET /ipxe/cpu1.ipxe HTTP/1.1" 200' in log and '"GET /ipxe/../dnsmasq.conf HTTP/1.1" 404' in log


def test_when_dnsmasq_dies_the_command_stops_the_http_server_and_exits_1_naming_it(
    work: Path, net: netns.BootNetwork
) -> None:
    _image(work)
    serve = serving.start(net, _spec(work, net.server_if))  # no --render: a private folder, removed after
    try:
        serve.wait_serving()
        assert serve.folder.is_dir() and (serve.folder / "dnsmasq.conf").is_file()
        os.kill(serve.dnsmasq_pid, signal.SIGKILL)
        assert serve.finish() == 1, serve.output()
    finally:
        serving.stop(serve)
    err = "".join(serve.stderr)
    assert f"gpuforge provision: dnsmasq (pid {serve.dnsmasq_pid}) was killed by SIGKILL; its last output:\n" in err
    assert "TFTP root is" in err.split("its last output:")[1]
    assert not serving.alive(serve.http_pid) and serving.listening(net) == ""
    assert not serve.folder.exists()


def test_a_port_in_use_exits_2_naming_it_before_anything_starts(work: Path, net: netns.BootNetwork) -> None:
    _image(work)
    hold = ("import socket, sys; s = socket.socket(); s.bind(('10.99.0.1', 8080)); s.listen(); print('up', flush=True);"
            " sys.stdin.read()")  # fmt: skip
    holder = subprocess.Popen(["ip", "netns", "exec", net.server_ns, sys.executable, "-c", hold],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "up\n"
        serve = serving.start(net, _spec(work, net.server_if), "--render", str(work / "boot"))
        code = serve.finish(timeout=30)
    finally:
        holder.kill()
        holder.wait(timeout=5)
    assert code == 2, serve.output()
    assert "".join(serve.stderr) == (
        "gpuforge provision: provisioning.server.http_port: port 8080 on 10.99.0.1 is in use "
        "(another server listens there)\n"
    )
    assert not (work / "boot").exists() and serve.stdout == []


def test_a_missing_interface_and_missing_image_files_exit_2_naming_the_fields(work: Path) -> None:
    spec = _spec(work, "gfnone0")
    done = subprocess.run([sys.executable, "-m", "gpuforge", "provision", str(spec), "--serve", "--render",
                           str(work / "boot")], cwd=netns.ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    image = work / "images" / "cpu"
    hint = "(gpuforge image build --format qcow2 writes vmlinuz and initrd.img)"
    assert done.stderr.splitlines() == [
        "gpuforge provision: provisioning.server.interface: no interface gfnone0 on this host",
        f"gpuforge provision: node_groups[1].boot.image: {image}/vmlinuz: no such file {hint}",
        f"gpuforge provision: node_groups[1].boot.image: {image}/initrd.img: no such file {hint}",
    ]
    assert not (work / "boot").exists() and done.stdout == ""
