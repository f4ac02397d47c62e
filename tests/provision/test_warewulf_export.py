"""``gpuforge provision SPEC --warewulf DIR --netdev NAME``: the exact ``wwctl.sh`` for a small spec,
run by a real ``sh`` against a stand-in ``wwctl`` that checks every call against the cited flag table
(not a Warewulf server); quoting of hostile values; missing inputs exit 2 naming the field or node
with nothing written; no secret of the cluster anywhere in the export."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from gpuforge.deploy.secrets import SecretStore
from gpuforge.provision import warewulf
from tests.provision import specs
from tests.provision.wwctl_standin import StandIn

REPO = Path(__file__).resolve().parents[2]
SECRET = specs.SECRET
ARCHIVE = b"an OCI archive stand-in\n"
COMMIT = warewulf.COMMIT


provision = specs.provision


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The spec (cpu1, cpu2 booting images/cpu; IPMI BMCs with a credentials file) and the group's archive."""
    (tmp_path / "images" / "cpu").mkdir(parents=True)
    (tmp_path / "images" / "cpu" / "image.oci.tar").write_bytes(ARCHIVE)
    return specs.bmc_site(tmp_path)


SCRIPT = f"""#!/bin/sh
# Written by gpuforge provision --warewulf for Warewulf 4.6 or later (wwctl read at v4.7.0,
# {COMMIT}). Run as root on the Warewulf server; the archives are beside this script.
set -eu
cd -- "$(dirname -- "$0")"
wwctl image import --build images/cpu.oci.tar t-cpu
wwctl node add --image=t-cpu --netdev=eno1 --hwaddr=0c:c4:7a:00:00:01 --ipaddr=10.99.0.11 --netmask=255.255.255.0 cpu1
wwctl node add --image=t-cpu --netdev=eno1 --hwaddr=0c:c4:7a:00:00:02 --ipaddr=10.99.0.12 --netmask=255.255.255.0 cpu2
wwctl configure dhcp
wwctl configure hostfile
wwctl overlay build cpu1 cpu2
"""


def test_the_export_is_the_script_the_archive_and_the_readme(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), "--netdev", "eno1")
    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "README.txt", "images", "images/cpu.oci.tar", "wwctl.sh",
    ]  # fmt: skip
    assert (out / "wwctl.sh").read_text() == SCRIPT
    assert (out / "wwctl.sh").stat().st_mode & 0o777 == 0o755
    assert (out / "images" / "cpu.oci.tar").read_bytes() == ARCHIVE
    readme = (out / "README.txt").read_text()
    assert "sh wwctl.sh" in readme
    assert "gpuforge apply SPEC --limit cpu[1-2]" in readme
    assert "No overlay" in readme


def test_a_limit_exports_only_its_nodes(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "ww"
    assert provision(str(site), "--warewulf", str(out), "--netdev", "eno1", "--limit", "cpu2").returncode == 0
    lines = (out / "wwctl.sh").read_text().splitlines()
    assert [line for line in lines if line.startswith("wwctl node add")] == [
        "wwctl node add --image=t-cpu --netdev=eno1 --hwaddr=0c:c4:7a:00:00:02 --ipaddr=10.99.0.12 "
        "--netmask=255.255.255.0 cpu2"
    ]
    assert lines[-1] == "wwctl overlay build cpu2"


def test_sh_runs_the_script_against_the_standin_and_makes_exactly_these_calls(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "ww"
    assert provision(str(site), "--warewulf", str(out), "--netdev", "eno1").returncode == 0
    standin = StandIn(tmp_path / "standin")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(["sh", str(out / "wwctl.sh")], cwd=elsewhere, env=standin.env(dict(os.environ)),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    node = {"image": "t-cpu", "netdev": "eno1", "netmask": "255.255.255.0"}
    cwd = str(out)
    assert standin.calls() == [
        {"command": "image import", "flags": {"build": None}, "args": ["images/cpu.oci.tar", "t-cpu"], "cwd": cwd,
         "sha256": hashlib.sha256(ARCHIVE).hexdigest()},
        {"command": "node add", "flags": {**node, "hwaddr": "0c:c4:7a:00:00:01", "ipaddr": "10.99.0.11"},
         "args": ["cpu1"], "cwd": cwd},
        {"command": "node add", "flags": {**node, "hwaddr": "0c:c4:7a:00:00:02", "ipaddr": "10.99.0.12"},
         "args": ["cpu2"], "cwd": cwd},
        {"command": "configure dhcp", "flags": {}, "args": [], "cwd": cwd},
        {"command": "configure hostfile", "flags": {}, "args": [], "cwd": cwd},
        {"command": "overlay build", "flags": {}, "args": ["cpu1", "cpu2"], "cwd": cwd},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [
        "wwctl node add --hwaddr=0c:c4:7a:00:00:01 --container=x cpu1",  # deprecated, not in the table
        "wwctl image import --force images/cpu.oci.tar t-cpu",  # a real flag gpuforge does not use
        "wwctl image import images/cpu.oci.tar t-cpu extra",  # cobra.RangeArgs(1, 2)
        "wwctl configure dhcp now",  # cobra.NoArgs
        "wwctl image import images/missing.oci.tar t-cpu",  # not a file
        "wwctl container import images/cpu.oci.tar t-cpu",  # the name before 4.6
    ],
)
def test_the_standin_refuses_what_the_table_does_not_have(line: str, site: Path, tmp_path: Path) -> None:
    standin = StandIn(tmp_path / "standin")
    done = subprocess.run(["sh", "-c", line], cwd=site.parent, env=standin.env(dict(os.environ)),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and done.stderr, line
    assert standin.calls() == []


HOSTILE = ["a b", "x'y", "$(touch pwned)", "`touch pwned`", "semi;touch pwned", "new\nline", '"q"', "*"]


def test_hostile_values_reach_wwctl_as_one_argument_each(tmp_path: Path) -> None:
    standin = StandIn(tmp_path / "standin")
    lines = [warewulf.command(("node", "add"), [value], {"image": value, "netdev": value}) for value in HOSTILE]
    done = subprocess.run(["sh", "-eu", "-c", "\n".join(lines)], cwd=tmp_path, env=standin.env(dict(os.environ)),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [(c["args"], c["flags"]) for c in standin.calls()] == [([v], {"image": v, "netdev": v}) for v in HOSTILE]
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("words", "args", "flags", "message"),
    [
        (("node", "add"), ["cpu1"], {"ipmipass": "x"}, "no flag --ipmipass=VALUE"),
        (("image", "import"), ["a", "b"], {"build": "yes"}, "no flag --build=VALUE"),
        (("image", "import"), ["a", "b", "c"], {}, "3 arguments"),
        (("container", "import"), ["a"], {}, "not in the cited table"),
        (("node", "add"), ["--all"], {}, "starts with '-'"),
    ],
)
def test_command_refuses_what_the_table_does_not_have(
    words: tuple[str, ...], args: list[str], flags: dict[str, str | None], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        warewulf.command(words, args, flags)


def test_every_table_row_cites_the_pinned_commit() -> None:
    for row in [*(c.source for c in warewulf.WWCTL.values()), *warewulf.SOURCES.values()]:
        assert f"github.com/warewulf/warewulf/blob/{COMMIT}/" in row.where
        assert row.section


def _nothing_written(done: subprocess.CompletedProcess[str], out: Path) -> None:
    assert done.returncode == 2
    assert not out.exists()


def test_a_group_without_its_image_folder_exits_2_naming_the_field(site: Path, tmp_path: Path) -> None:
    (site.parent / "images" / "cpu" / "image.oci.tar").unlink()
    (site.parent / "images" / "cpu").rmdir()
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), "--netdev", "eno1")
    _nothing_written(done, out)
    assert done.stderr == (
        f"gpuforge provision: node_groups[1].boot.image: {site.parent}/images/cpu: no such folder "
        "(gpuforge image build -o writes it)\n"
    )


def test_an_image_folder_without_the_archive_exits_2_naming_the_field(site: Path, tmp_path: Path) -> None:
    (site.parent / "images" / "cpu" / "image.oci.tar").unlink()
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), "--netdev", "eno1")
    _nothing_written(done, out)
    assert done.stderr == (
        f"gpuforge provision: node_groups[1].boot.image: no image.oci.tar in {site.parent}/images/cpu "
        "(gpuforge image build --format oci)\n"
    )


def test_a_node_without_a_boot_mac_exits_2_naming_it(tmp_path: Path) -> None:
    data = specs.edited(specs.spec_data(), "node_groups", 1, "boot", "macs", value={"cpu1": specs.MACS["cpu1"]})
    path = specs.write(data, tmp_path)
    out = tmp_path / "ww"
    done = provision(str(path), "--warewulf", str(out), "--netdev", "eno1")
    _nothing_written(done, out)
    assert "node_groups[1].boot.macs" in done.stderr and "cpu2" in done.stderr
    assert "no boot MAC" in done.stderr


def test_a_node_of_the_limit_without_a_boot_section_exits_2_naming_it(site: Path, tmp_path: Path) -> None:
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), "--netdev", "eno1", "--limit", "ctl1")
    _nothing_written(done, out)
    assert done.stderr.startswith("gpuforge provision: ctl1: no boot section in the spec (node_groups[].boot)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--warewulf needs --netdev NAME"),
        (["--netdev", "eno 1"], "--netdev: 'eno 1' is not an interface name"),
        (["--netdev", "$(reboot)"], "--netdev: '$(reboot)' is not an interface name"),
    ],
)
def test_a_missing_or_bad_netdev_exits_2(args: list[str], message: str, site: Path, tmp_path: Path) -> None:
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), *args)
    _nothing_written(done, out)
    assert done.stderr.startswith(f"gpuforge provision: {message}")


def test_netdev_goes_with_warewulf_only(site: Path, tmp_path: Path) -> None:
    done = provision(str(site), "--render", str(tmp_path / "r"), "--netdev", "eno1")
    assert done.returncode == 2
    assert done.stderr == "gpuforge provision: --netdev goes with --warewulf only\n"


def _forms(value: bytes) -> list[bytes]:
    return [value, value.hex().encode(), base64.b64encode(value)]


def test_no_secret_of_the_cluster_is_in_the_export(site: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = SecretStore("t", state)
    secrets = [store.munge_key(), store.db_password().encode(), store.health_key(), SECRET.encode()]
    out = tmp_path / "ww"
    done = provision(str(site), "--warewulf", str(out), "--netdev", "eno1",
                     env={**os.environ, "GPUFORGE_STATE_DIR": str(state)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 3
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            for form in _forms(secret):
                assert form not in data, path
    assert SECRET not in done.stdout + done.stderr
    assert "bmc.cred" not in "".join(p.read_text() for p in files if p.suffix in {".sh", ".txt"})
