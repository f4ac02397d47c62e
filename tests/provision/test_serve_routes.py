"""``--serve`` without a network: the URL -> file map (exactly the URLs the rendered files point to),
the HTTP handler on a loopback port (only the map's exact paths, GET only, Content-Length), and the
supervision of real child processes (a child's exit named with its escaped output; a stop signal
stops both). No root needed."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.provision import http as file_server
from gpuforge.provision import preflight, serve
from gpuforge.render import pxe
from gpuforge.spec.pxe_facts import IPXE_HTTP
from tests.provision import specs

ROOT = Path(__file__).resolve().parents[2]


def _two_groups(image_gpu: str) -> dict[str, Any]:
    """The test spec plus a gpu group (gpu1, disk boot) whose image folder is ``image_gpu``."""
    data = specs.spec_data()
    data["node_groups"].append({
        "name": "gpu", "hosts": "gpu1", "address_start": "10.99.0.21", "roles": ["compute"], "hardware": specs.HARDWARE,
        "boot": {"mode": "disk", "image": image_gpu, "root": "LABEL=root", "macs": {"gpu1": "0c:c4:7a:00:00:21"}},
    })  # fmt: skip
    data["slurm"]["partitions"][0]["nodes"] = "cpu,gpu"
    return data


def _urls_in(files: dict[str, str]) -> set[str]:
    """The URL paths the rendered files name: dnsmasq's script URLs, the scripts' kernel and initrd."""
    base = "http://10.99.0.1:8080"
    found = {line.rpartition(",")[2] for line in files[pxe.DNSMASQ_CONF].splitlines() if base in line}
    for rel, text in files.items():
        if rel != pxe.DNSMASQ_CONF:
            found |= {line.split()[1] for line in text.splitlines() if line.split()[0] in ("kernel", "initrd")}
    assert all(u.startswith(base) for u in found), found
    return {u.removeprefix(base) for u in found}


def test_the_map_is_each_nodes_script_and_its_groups_kernel_and_initrd(tmp_path: Path) -> None:
    spec = specs.parse(_two_groups("/srv/images/gpu"), tmp_path)
    names = ["cpu1", "cpu2", "gpu1"]
    got = preflight.routes(spec, names, tmp_path / "boot", tmp_path)
    assert got == {
        "/ipxe/cpu1.ipxe": tmp_path / "boot/http/ipxe/cpu1.ipxe",
        "/images/cpu/vmlinuz": tmp_path / "images/cpu/vmlinuz",
        "/images/cpu/initrd.img": tmp_path / "images/cpu/initrd.img",
        "/ipxe/cpu2.ipxe": tmp_path / "boot/http/ipxe/cpu2.ipxe",
        "/ipxe/gpu1.ipxe": tmp_path / "boot/http/ipxe/gpu1.ipxe",
        "/images/gpu/vmlinuz": Path("/srv/images/gpu/vmlinuz"),
        "/images/gpu/initrd.img": Path("/srv/images/gpu/initrd.img"),
    }
    assert set(got) == _urls_in(pxe.rendered_files(spec, names))
    for url, path in got.items():  # each rendered script is served from where --render writes it
        if url.startswith("/ipxe/"):
            assert str(path.relative_to(tmp_path / "boot")) in pxe.rendered_files(spec, names)


def test_a_limit_serves_only_its_nodes_and_their_groups_images(tmp_path: Path) -> None:
    spec = specs.parse(_two_groups("images/gpu"), tmp_path)
    got = preflight.routes(spec, ["gpu1"], Path("rel/boot"), tmp_path)
    assert got == {
        "/ipxe/gpu1.ipxe": Path.cwd() / "rel/boot/http/ipxe/gpu1.ipxe",
        "/images/gpu/vmlinuz": tmp_path / "images/gpu/vmlinuz",
        "/images/gpu/initrd.img": tmp_path / "images/gpu/initrd.img",
    }
    assert set(got) == _urls_in(pxe.rendered_files(spec, ["gpu1"]))


def test_missing_image_files_are_named_by_their_group_field(tmp_path: Path) -> None:
    spec = specs.parse(_two_groups("images/gpu"), tmp_path)
    (tmp_path / "images/gpu").mkdir(parents=True)
    (tmp_path / "images/gpu/vmlinuz").write_bytes(b"k")
    hint = "(gpuforge image build --format qcow2 writes vmlinuz and initrd.img)"
    assert preflight.image_issues(spec, ["gpu1"], tmp_path) == [
        f"node_groups[2].boot.image: {tmp_path}/images/gpu/initrd.img: no such file {hint}"
    ]
    assert len(preflight.image_issues(spec, ["cpu1", "gpu1"], tmp_path)) == 3


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, dict[str, bytes]]]:
    """The HTTP server on a loopback port serving two files: a script and a 'kernel'."""
    tmp_path = tmp_path_factory.mktemp("site")
    data = {"/ipxe/n1.ipxe": b"#!ipxe\nboot\n", "/images/g/vmlinuz": os.urandom(3 << 20)}
    table: dict[str, Path] = {}
    for i, (url, body) in enumerate(data.items()):
        table[url] = tmp_path / f"f{i}{Path(url).suffix}"
        table[url].write_bytes(body)
    table["/images/g/initrd.img"] = tmp_path / "gone"
    server = file_server.server_on(file_server.listening("127.0.0.1", 0), table)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.socket.getsockname()[1], data
    server.shutdown()
    server.server_close()


def _get(host: str, port: int, path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.putrequest(method, path, skip_accept_encoding=True)
    for key, value in headers.items():
        conn.putheader(key, value)
    conn.endheaders()
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    return answer.status, dict(answer.getheaders()), body


def test_the_server_answers_the_maps_exact_paths_with_their_bytes_and_length(
    site: tuple[str, int, dict[str, bytes]],
) -> None:
    host, port, data = site
    for url, body in data.items():
        status, headers, got = _get(host, port, url)
        assert (status, got, headers["Content-Length"]) == (200, body, str(len(body)))
    status, headers, _ = _get(host, port, "/ipxe/n1.ipxe")
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    # iPXE's kernel/initrd send no Range (IPXE_HTTP): a Range is ignored, the whole file comes back
    status, _, got = _get(host, port, "/images/g/vmlinuz", Range="bytes=0-9")
    assert (status, got) == (200, data["/images/g/vmlinuz"])


def test_dnsmasq_runs_with_cited_options_only_and_the_http_facts_are_cited(tmp_path: Path) -> None:
    argv = serve.dnsmasq_argv("/usr/sbin/dnsmasq", tmp_path)
    assert argv == ["/usr/sbin/dnsmasq", "--keep-in-foreground", f"--conf-file={tmp_path}/dnsmasq.conf",
                    f"--pid-file={tmp_path}/dnsmasq.pid", f"--dhcp-leasefile={tmp_path}/dnsmasq.leases",
                    "--log-facility=-"]  # fmt: skip
    assert {a.partition("=")[0] for a in argv[1:]} == set(serve.DNSMASQ_RUN_OPTIONS)
    for citation in (*serve.DNSMASQ_RUN_OPTIONS.values(), *IPXE_HTTP.values()):
        assert citation.title and citation.where and citation.section
    assert all(c.where.startswith("https://github.com/") for c in IPXE_HTTP.values())


@pytest.mark.parametrize(
    "path",
    ["/", "/ipxe/", "/ipxe", "//ipxe/n1.ipxe", "/ipxe/../ipxe/n1.ipxe", "/ipxe/n1.ipxe?x", "/ipxe/n1.ipxe/",
     "/ipxe/%6e1.ipxe", "/IPXE/n1.ipxe", "/images/g/initrd.img", "http://127.0.0.1/ipxe/n1.ipxe"],
)  # fmt: skip
def test_anything_else_is_404(site: tuple[str, int, dict[str, bytes]], path: str) -> None:
    host, port, _ = site
    assert _get(host, port, path)[0] == 404  # the last mapped one's file is missing: 404 too, logged


@pytest.mark.parametrize("method", ["HEAD", "POST", "PUT", "DELETE"])
def test_only_get_is_answered(site: tuple[str, int, dict[str, bytes]], method: str) -> None:
    host, port, _ = site
    assert _get(host, port, "/ipxe/n1.ipxe", method)[0] == 501


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_that_exits_is_named_with_its_last_output_control_characters_escaped() -> None:
    code = "import sys; sys.stderr.write('one\\ntwo \\x1b[31mred\\n'); sys.exit(3)"
    child = serve.start("worker", _python(code), None)
    child.proc.wait(timeout=30)
    last = "its last output:\n  one\n  two \\x1b[31mred"
    assert serve.exited([child]) == f"worker (pid {child.proc.pid}) exited 3; {last}"


def _fake_dnsmasq(tmp_path: Path, then: str) -> str:
    """A stand-in for dnsmasq that logs its ready line, then runs ``then`` (to test the supervision alone)."""
    script = tmp_path / "dnsmasq"
    ready = "print('TFTP root is /x', file=sys.stderr, flush=True)"
    script.write_text(f"#!{sys.executable}\nimport os, signal, sys, time\n{ready}\n{then}\n")
    script.chmod(0o755)
    return str(script)


def test_run_stops_both_children_on_a_stop_signal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listener = file_server.listening("127.0.0.1", 0)
    before = signal.getsignal(signal.SIGTERM)
    # the stand-in, once ready, sends this process the SIGTERM an operator would
    stand_in = _fake_dnsmasq(tmp_path, "time.sleep(1); os.kill(os.getppid(), signal.SIGTERM); time.sleep(60)")
    code = serve.run(stand_in, tmp_path, listener, {}, "lo")
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("serving: dnsmasq pid ")
    assert out.endswith("stopped: dnsmasq and the HTTP server have exited\n")
    assert signal.getsignal(signal.SIGTERM) is before  # the old handler is back


def test_run_exits_1_naming_the_child_that_died_and_stops_the_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listener = file_server.listening("127.0.0.1", 0)
    port = listener.getsockname()[1]
    code = serve.run(_fake_dnsmasq(tmp_path, "time.sleep(1); sys.exit(5)"), tmp_path, listener, {}, "lo")
    err = capsys.readouterr().err
    assert code == 1
    assert "gpuforge provision: dnsmasq (pid " in err and ") exited 5; its last output:\n  TFTP root is /x\n" in err
    file_server.listening("127.0.0.1", port).close()  # the HTTP child is gone: its port is free again


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie nobody reaped yet) within ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_the_http_child_ends_with_its_parent_even_on_sigkill() -> None:
    parent_code = (
        "import time; from gpuforge.provision import http, serve; s = http.listening('127.0.0.1', 0); "
        "c = serve.http_child(s.fileno(), {}); [time.sleep(0.05) for _ in range(200) if not c.tail]; "
        "print(c.proc.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(_python(parent_code), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child, 0.5)  # up (it logged its first line) and serving while its parent lives
        parent.kill()
        parent.wait(timeout=10)
        assert _gone(child, 5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
        if child and not _gone(child, 0):
            os.kill(child, signal.SIGKILL)
