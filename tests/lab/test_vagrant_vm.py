"""Node validation with Vagrant, proven here: a box built on this machine boots under TCG, gpuforge
applies and validates the VM, a second apply changes nothing, and nothing is left afterwards.

Everything runs inside network namespace ``gf-vagrant`` (libvirtd, its VM networks, vagrant,
gpuforge); the VM reaches packages only through the site mirror relayed into it
(:mod:`gpuforge.lab.vagrant_ci`). The box is cached under /var/cache/gpuforge/vagrant.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuforge.lab.vagrant_box import build_box
from gpuforge.lab.vagrant_ci import POOL_DIR, leftovers, netns_inode, vagrant_lab
from gpuforge.probes.vagrant import parse_ssh_config
from tests.conftest import REPO

SPEC = REPO / "inventories" / "vagrant.yaml"


def _spec_for_one_vm(path: Path, known_hosts: Path) -> None:
    """inventories/vagrant.yaml with both roles on node1 and packages through the relayed mirror."""
    doc = yaml.safe_load(SPEC.read_text())
    doc["ssh"]["known_hosts"] = str(known_hosts)
    doc["sources"] = {"mode": "mirror", "apt_proxy": "http://10.213.0.1:3142"}
    ctl = doc["node_groups"][0]
    ctl["roles"] = ["controller", "compute"]
    doc["node_groups"] = [ctl]
    doc["slurm"]["partitions"] = [{"name": "batch", "nodes": "ctl", "default": True}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _json(cp: object, what: str) -> dict:
    out = getattr(cp, "stdout", "")
    assert out.strip(), f"{what} printed nothing: {getattr(cp, 'stderr', '')[-3000:]}"
    return json.loads(out)


@pytest.mark.lab
@pytest.mark.slow
def test_vagrant_vm_applies_validates_and_is_destroyed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    box = build_box(log=print)
    box_s = time.monotonic() - t0

    workdir = tmp_path / "vagrant"
    workdir.mkdir()
    shutil.copy(REPO / "Vagrantfile", workdir / "Vagrantfile")
    spec, known_hosts = workdir / "spec.yaml", workdir / "known_hosts"
    _spec_for_one_vm(spec, known_hosts)
    gpuforge = [sys.executable, "-m", "gpuforge"]
    env = {"GPUFORGE_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}

    inode = None
    networks_before = [p.name for p in Path("/etc/libvirt/qemu/networks").glob("*.xml")]  # Debian's "default"
    with vagrant_lab(str(workdir), box, nodes=1, log=print) as vl:
        inode = netns_inode(vl.netns)
        assert inode is not None
        t1 = time.monotonic()
        vl.vagrant("up", "--provider=libvirt", timeout=1200)
        up_s = time.monotonic() - t1
        cp = vl.run(["vagrant", "ssh-config"], timeout=120)
        hosts = parse_ssh_config(cp.stdout)
        assert list(hosts) == ["node1"], cp.stderr
        assert hosts["node1"].identity_file == box.private_key  # the box's own key, not Vagrant's insecure one
        host = hosts["node1"].hostname
        vl.pin_host_keys([host], str(known_hosts))
        # The vagrant user accepts this box's key and nothing else (no Vagrant insecure key).
        ssh = ["ssh", "-i", box.private_key, "-o", f"UserKnownHostsFile={known_hosts}", "-o", "BatchMode=yes"]
        keys = vl.run([*ssh, "-o", "StrictHostKeyChecking=yes", f"vagrant@{host}", "cat ~/.ssh/authorized_keys"])
        assert keys.stdout.split("\n")[:-1] == [Path(box.private_key + ".pub").read_text().strip()], keys.stderr

        t2 = time.monotonic()
        first = vl.run([*gpuforge, "apply", "--yes", str(spec), "--json"], timeout=1800, env=env)
        apply_s = time.monotonic() - t2
        result = _json(first, "apply")
        assert first.returncode == 0 and result["ok"], first.stderr[-3000:]
        assert result["hosts"]["node1"]["changed"], "a fresh VM must change"

        report = vl.run([*gpuforge, "validate", str(spec), "--json"], timeout=600, env=env)
        checks = _json(report, "validate")
        assert report.returncode == 0, json.dumps(checks, indent=1)[-4000:]
        (node,) = checks["nodes"]
        passed = {r["id"] for r in node["checks"] if r["status"] == "pass"}
        # Slurm really runs on the VM (slurmctld and slurmd, the node idle in sinfo), its host key pinned.
        want = {"scheduler.slurmctld", "scheduler.slurmd", "scheduler.node_state", "security.ssh_host_keys"}
        assert want <= passed, sorted(passed)

        second = vl.run([*gpuforge, "apply", "--yes", str(spec), "--json"], timeout=900, env=env)
        again = _json(second, "second apply")
        assert second.returncode == 0 and again["changes"] == 0, again

        vl.vagrant("destroy", "-f", timeout=300)
        domains = vl.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], timeout=60)
        assert domains.returncode == 0 and domains.stdout.split() == [], domains.stdout
    assert leftovers(inode) == []
    # nothing of libvirt's left either: no pool folder, no network vagrant-libvirt defined (the
    # namespace's libvirtd is gone with it; its definitions would be files under /etc/libvirt)
    assert not Path(POOL_DIR).exists()
    defined = sorted(p.name for p in Path("/etc/libvirt/qemu/networks").glob("*.xml"))
    assert set(defined) <= set(networks_before), defined
    with capsys.disabled():  # in the run's log, also when the test passes (the README quotes it)
        print(
            f"\nvagrant: box {box_s:.0f} s (cached when a few seconds), vagrant up {up_s:.0f} s, "
            f"first apply {apply_s:.0f} s, whole test {time.monotonic() - t0:.0f} s"
        )
