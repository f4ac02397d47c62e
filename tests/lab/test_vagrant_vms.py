"""Vagrant VMs for real, and on them the fabric and NFS: two Debian 12 VMs (libvirt, qemu without
KVM) booted from the box built here, which boots Debian's generic kernel.

One boot of two VMs serves every proof a VM is needed for (the container lab's kernel has neither
RDMA nor an NFS server; a VM's own kernel has ``rdma_rxe`` and ``nfsd``):

- the Vagrant path: ``vagrant up`` of the box built here, the box's own SSH key and nothing else,
  host keys pinned, ``gpuforge apply`` and ``validate`` through ``connector: vagrant``;
- ``fabric: {type: roce, soft_roce: [eth1]}`` brings up a Soft-RoCE device on each VM (rdma-core,
  perftest, OpenMPI with PMIx, Slurm's ``MpiDefault=pmix``); ``validate`` passes the fabric node
  checks and the pair test (real ``ib_write_bw`` and ``ib_read_lat`` between the VMs; the read
  latency judged against the spec's threshold, the write bandwidth reported) and ``storage.mounts``
  (node1 serves NFS, both mount it, a file written on one is read on the other);
- an MPI program built on the shared NFS folder runs as ``srun --mpi=pmix -N2`` through Slurm and
  moves a 1 MiB buffer between the two VMs and back. Debian's OpenMPI 4.1.4 picks ob1 over TCP here:
  its UCX (1.13.1) on Soft-RoCE under TCG fails (``UCX_TLS=rc_verbs,ud_verbs``: "UD endpoint ...
  unhandled timeout error"; without ud_verbs: "no auxiliary transport"), while perftest's own RC
  and UD tests pass between the same devices, so RDMA traffic is proven by the pair test;
- a second apply changes nothing; after ``vagrant destroy`` nothing of libvirt or the namespace is left.

Everything runs inside network namespace ``gf-vagrant`` (:mod:`gpuforge.lab.vagrant_ci`); the VMs
reach Debian's packages only through the site mirror relayed into it. The box is cached under
/var/cache/gpuforge/vagrant.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.lab.vagrant_box import build_box
from gpuforge.lab.vagrant_ci import POOL_DIR, VagrantLab, leftovers, netns_inode, vagrant_lab
from gpuforge.probes.vagrant import parse_ssh_config
from tests.conftest import REPO

SPEC = REPO / "inventories" / "vagrant.yaml"
PINGPONG = Path(__file__).with_name("mpi_pingpong.c")
# Under TCG a Soft-RoCE link is slow and uneven: ib_write_bw's duration mode measured 0.03 to 0.24 Gb/s
# in some runs and 0 Gb/s (no write completed inside its measuring window) in others, while
# ib_read_lat's RDMA reads always completed (275 to 560 us). So the test judges the read latency
# (a real figure from real RDMA reads) and only reports the write bandwidth; a real cluster's spec
# asks for its links' rate.
READ_LAT_MAX_US = 1_000_000.0


def fabric_spec(path: Path, known_hosts: Path) -> dict[str, Any]:
    """inventories/vagrant.yaml fitted to two VMs: node1 controller + compute + NFS server, node2 compute,
    a Soft-RoCE fabric on the private network (eth1) of both, /shared mounted on both."""
    doc = yaml.safe_load(SPEC.read_text())
    doc["cluster"]["name"] = "gffabric"
    doc["ssh"]["known_hosts"] = str(known_hosts)
    doc["sources"] = {"mode": "mirror", "apt_proxy": "http://10.213.0.1:3142"}
    fabric = {
        "type": "roce",
        "soft_roce": ["eth1"],
        "thresholds": {"read_lat_us": READ_LAT_MAX_US, "write_bw_seconds": 10},
    }
    ctl, workers = doc["node_groups"]
    ctl["roles"] = ["controller", "compute", "storage"]
    workers["hosts"] = "node2"
    for group in (ctl, workers):
        group["fabric"] = fabric
        group["leaf_switch"] = "leaf1"  # one switch joins both groups: the pair test pairs across them
    doc["topology"] = {"switches": [{"name": "leaf1"}]}
    doc["slurm"]["partitions"] = [{"name": "batch", "nodes": "ctl,workers", "default": True}]
    doc["storage"] = {
        "exports": [{"name": "shared", "path": "/srv/shared"}],
        "mounts": [{"name": "shared", "path": "/shared", "nodes": "ctl,workers", "export": "shared"}],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


def _json(cp: Any, what: str) -> dict[str, Any]:
    out = getattr(cp, "stdout", "")
    assert out.strip(), f"{what} printed nothing: {getattr(cp, 'stderr', '')[-3000:]}"
    return json.loads(out)


class Vms:
    """SSH into the VMs as the vagrant user, host keys checked."""

    def __init__(self, vl: VagrantLab, key: str, known_hosts: Path, hosts: dict[str, str]) -> None:
        self.vl, self.key, self.known_hosts, self.hosts = vl, key, known_hosts, hosts

    def ssh(self, node: str, cmd: str, timeout: float = 600, stdin: str | None = None) -> Any:
        argv = ["ssh", "-i", self.key, "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=yes", f"vagrant@{self.hosts[node]}", cmd]  # fmt: skip
        if stdin is None:
            return self.vl.run(argv, timeout=timeout)
        import subprocess

        full = ["ip", "netns", "exec", self.vl.netns, *argv]
        return subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=timeout)


def _checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(node, check id) -> the check's record (cluster checks are reported on each node they judge)."""
    return {(n["name"], r["id"]): r for n in report["nodes"] for r in n["checks"]}


def _assert_checks(report: dict[str, Any], pair_report: dict[str, Any]) -> None:
    """Slurm really runs (slurmctld, slurmd, both nodes idle), host keys pinned, the fabric up, NFS shared;
    the pair test moved real RDMA traffic between the VMs."""
    checks = _checks(report)
    want = {"fabric.devices", "fabric.ports", "fabric.modules", "storage.mounts", "scheduler.slurmd",
            "scheduler.node_state", "security.ssh_host_keys"}  # fmt: skip
    for node in ("node1", "node2"):
        passed = {cid for (where, cid), r in checks.items() if where == node and r["status"] == "pass"}
        assert want <= passed, (node, sorted(want - passed))
    assert checks[("node1", "scheduler.slurmctld")]["status"] == "pass", checks[("node1", "scheduler.slurmctld")]
    assert all(cid != "fabric.pairs" for _, cid in checks), "the pair test is opt-in"
    pairs = [r for (_, cid), r in _checks(pair_report).items() if cid == "fabric.pairs"]
    assert len(pairs) == 2 and all(r["status"] == "pass" for r in pairs), pairs
    assert re.fullmatch(r"node1->node2: write [0-9.]+ Gb/s, read lat [0-9.]+ us", pairs[0]["message"]), pairs[0]
    print("fabric.pairs:", pairs[0]["message"])


def _mpi_through_slurm(vms: Vms) -> str:
    """Build the ping-pong on the shared NFS folder (node1), run it on both VMs with srun --mpi=pmix."""
    build = vms.ssh("node1", "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                    "libopenmpi-dev gcc libc6-dev >/dev/null && sudo install -d -o vagrant /shared/mpi && "
                    "cat > /shared/mpi/pingpong.c && mpicc -O2 -o /shared/mpi/pingpong /shared/mpi/pingpong.c",
                    timeout=900, stdin=PINGPONG.read_text())  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    srun = "srun --mpi=pmix -N2 -n2 --ntasks-per-node=1 -t 10 ./pingpong"
    job = vms.ssh("node1", f"cd /shared/mpi && {srun}", timeout=900)
    assert job.returncode == 0, f"{job.stdout[-2000:]}\n{job.stderr[-3000:]}"
    lines = sorted(job.stdout.split("\n")[:-1])
    assert lines == ["rank 0 of 2 on node1: buffer round trip ok", "rank 1 of 2 on node2: echoed"], job.stdout
    return job.stdout


@pytest.mark.lab
@pytest.mark.slow
def test_two_vagrant_vms_soft_roce_nfs_and_mpi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    box = build_box(log=print)
    workdir = tmp_path / "vagrant"
    workdir.mkdir()
    shutil.copy(REPO / "Vagrantfile", workdir / "Vagrantfile")
    spec, known_hosts = workdir / "spec.yaml", workdir / "known_hosts"
    fabric_spec(spec, known_hosts)
    gpuforge = [sys.executable, "-m", "gpuforge"]
    env = {"GPUFORGE_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    times: dict[str, float] = {}
    networks_before = [p.name for p in Path("/etc/libvirt/qemu/networks").glob("*.xml")]  # Debian's "default"
    with vagrant_lab(str(workdir), box, nodes=2, log=print) as vl:
        inode = netns_inode(vl.netns)
        t = time.monotonic()
        vl.vagrant("up", "--provider=libvirt", timeout=1800)
        times["vagrant up"] = time.monotonic() - t
        ssh_config = vl.run(["vagrant", "ssh-config"], timeout=120).stdout
        hosts = {n: h.hostname for n, h in parse_ssh_config(ssh_config).items()}
        assert sorted(hosts) == ["node1", "node2"]
        vl.pin_host_keys(list(hosts.values()), str(known_hosts))
        vms = Vms(vl, box.private_key, known_hosts, hosts)
        # The vagrant user accepts this box's key and nothing else (no Vagrant insecure key).
        keys = vms.ssh("node1", "cat ~/.ssh/authorized_keys")
        assert keys.stdout.split("\n")[:-1] == [Path(box.private_key + ".pub").read_text().strip()], keys.stderr

        t = time.monotonic()
        first = vl.run([*gpuforge, "apply", "--yes", str(spec), "--json"], timeout=2400, env=env)
        times["first apply"] = time.monotonic() - t
        assert first.returncode == 0 and _json(first, "apply")["ok"], first.stderr[-3000:]
        for node in hosts:
            link = vms.ssh(node, "rdma link show")
            assert "rxe_eth1/1 state ACTIVE" in link.stdout and "netdev eth1" in link.stdout, link.stdout

        t = time.monotonic()
        report = vl.run([*gpuforge, "validate", str(spec), "--json"], timeout=900, env=env)
        times["validate"] = time.monotonic() - t
        assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]
        pairs = vl.run([*gpuforge, "validate", str(spec), "--json", "--checks", "fabric.pairs"], timeout=900, env=env)
        assert pairs.returncode == 0, pairs.stdout[-4000:] + pairs.stderr[-2000:]
        _assert_checks(_json(report, "validate"), _json(pairs, "validate --checks fabric.pairs"))

        t = time.monotonic()
        mpi_out = _mpi_through_slurm(vms)
        times["mpi job"] = time.monotonic() - t

        second = vl.run([*gpuforge, "apply", "--yes", str(spec), "--json"], timeout=1200, env=env)
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
    with capsys.disabled():  # in the run's log, also when the test passes
        print("\n" + mpi_out + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()),
              f"whole test {time.monotonic() - t0:.0f} s")  # fmt: skip
