"""``gpuforge provision SPEC --plan | --render DIR``: the plan names each node's MAC, address, boot mode,
image and BMC (never a credential) and writes nothing; the render writes exactly the rendered files,
0644, with no credential in them; bad input exits 2 naming what is wrong."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuforge.render import pxe
from tests.provision import specs

SECRET = specs.SECRET
provision = specs.provision


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The spec (its compute nodes behind IPMI BMCs) and a 0600 credentials file beside it."""
    return specs.bmc_site(tmp_path)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_plan_names_each_node_and_the_files_and_writes_nothing(site: Path) -> None:
    before = _tree(site.parent)
    done = provision(str(site), "--plan")
    assert done.returncode == 0, done.stderr
    folder = site.parent
    missing = "(no vmlinuz, initrd.img: gpuforge image build --format qcow2 writes them)"
    assert done.stdout.splitlines() == [
        "provisioning server: 10.99.0.1/24 on gfpxe0, mode dhcp, TFTP /usr/lib/ipxe, HTTP http://10.99.0.1:8080",
        f"  cpu1: mac 0c:c4:7a:00:00:01, address 10.99.0.11, boot stateless, image {folder}/images/cpu {missing}, "
        f"bmc ipmi 198.51.100.21:623 (credentials file {folder}/bmc.cred)",
        f"  cpu2: mac 0c:c4:7a:00:00:02, address 10.99.0.12, boot stateless, image {folder}/images/cpu {missing}, "
        f"bmc ipmi 198.51.100.22:623 (credentials file {folder}/bmc.cred)",
        "files --render would write:",
        "  dnsmasq.conf",
        "  http/ipxe/cpu1.ipxe",
        "  http/ipxe/cpu2.ipxe",
        "nothing written, nothing started",
    ]
    assert _tree(site.parent) == before


def test_the_plan_of_a_limit_shows_only_its_nodes_and_a_built_image_without_a_note(site: Path) -> None:
    image = site.parent / "images" / "cpu"
    image.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img"):
        (image / name).write_bytes(b"")
    done = provision(str(site), "--plan", "--limit", "cpu2")
    assert done.returncode == 0, done.stderr
    assert "cpu1" not in done.stdout
    assert f"  cpu2: mac 0c:c4:7a:00:00:02, address 10.99.0.12, boot stateless, image {image}, bmc ipmi" in done.stdout


def test_render_writes_the_rendered_files_0644_without_a_credential(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "boot"
    done = provision(str(site), "--render", str(out))
    assert done.returncode == 0, done.stderr
    expected = pxe.rendered_files(specs.parse(specs.spec_data(), tmp_path))
    assert _tree(out) == ["dnsmasq.conf", "http", "http/ipxe", "http/ipxe/cpu1.ipxe", "http/ipxe/cpu2.ipxe"]
    for rel, text in expected.items():
        path = out / rel
        assert path.read_text() == text
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
        assert SECRET not in text and "bmc.cred" not in text and "admin" not in text


def test_render_replaces_a_planted_link_instead_of_writing_through_it(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "boot"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (out / "dnsmasq.conf").symlink_to(victim)
    assert provision(str(site), "--render", str(out)).returncode == 0
    assert victim.read_text() == "untouched\n"
    assert not (out / "dnsmasq.conf").is_symlink()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "gpuforge provision: give --plan (print, write nothing), --render DIR (write the files), --serve "
         "[--render DIR] (write them and serve the boot), --reimage --limit NODES [--yes] or --warewulf DIR "
         "--netdev NAME (a Warewulf export), one of them"),
        (["--plan", "--warewulf", "x"], "gpuforge provision: give --plan"),
        (["--plan", "--reimage"], "gpuforge provision: give --plan"),
        (["--plan", "--yes"], "gpuforge provision: --yes and --accept-new-host-keys go with --reimage only"),
        (["--plan", "--serve"], "gpuforge provision: give --plan"),
        (["--plan", "--render", "x"], "gpuforge provision: give --plan"),
        (["--plan", "--limit", "ctl1"],
         "gpuforge provision: ctl1: no boot section in the spec (node_groups[].boot): not network-booted"),
        (["--plan", "--limit", "gpu9"], "--limit: 'gpu9' matches no node of the spec"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_it(site: Path, args: list[str], message: str) -> None:
    done = provision(str(site), *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_a_spec_without_provisioning_exits_2(tmp_path: Path) -> None:
    data = specs.spec_data()
    del data["provisioning"]
    del data["node_groups"][1]["boot"]
    path = specs.write(data, tmp_path)
    done = provision(str(path), "--plan")
    assert done.returncode == 2
    assert done.stderr.strip() == f"gpuforge provision: {path}: no provisioning section: nothing boots over the network"
