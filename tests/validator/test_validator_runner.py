"""validate() over a fake cluster transport: the whole pipeline without SSH, plus cluster-check units."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.probes.slurm import parse_sinfo_nodes
from gpuforge.spec import SpecError, resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.validator import cluster, cluster_k8s
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from gpuforge.validator.registry import ALL_CHECKS, OPT_IN, UnknownCheck, registry_problems, resolve
from gpuforge.validator.report import Report
from gpuforge.validator.runner import Completed, SshTransport, explain_ssh_failure, validate

from .vhelpers import INVENTORIES, FakeCluster, lab_spec, node, nvidia_gpus_on_this_machine, output, spec_from, units

SCHED_JOB_SECURITY = ("scheduler", "job", "security")


def results(report: Report) -> dict[str, dict[str, Any]]:
    return {n.name: {r.id: r for r in n.checks} for n in report.nodes}


@pytest.fixture()
def lab(tmp_path: Path) -> tuple[Any, Path, FakeCluster]:
    spec, path = lab_spec(tmp_path)
    return spec, path, FakeCluster(spec)


def test_healthy_lab_passes_with_gpu_checks_skipped(lab: Any) -> None:
    spec, path, fake = lab
    report = validate(Cluster.of(spec, path), transport=fake)
    assert report.exit_code == 0, report.failures()
    r = results(report)
    assert sorted(r) == ["node1", "node2", "node3"]
    for name, checks in r.items():
        assert checks["connection.ssh"].status == PASS
        assert checks["hardware.gpu_count"].status == SKIP
        assert checks["hardware.gpu_count"].message.startswith("no NVIDIA device on the PCI bus")
        assert checks["driver.version"].status == SKIP
        for cid in ("scheduler.munge", "scheduler.slurmd", "scheduler.node_state", "scheduler.gres",
                    "scheduler.partitions", "job.srun", "security.munge_key", "security.munge_key_identical",
                    "security.ssh_host_keys"):  # fmt: skip
            assert checks[cid].status == PASS, (name, cid, checks[cid].message)
    assert r["node1"]["scheduler.slurmctld"].status == PASS
    assert r["node1"]["scheduler.accounting"].status == PASS
    assert r["node1"]["security.slurmdbd_conf"].status == PASS
    assert r["node2"]["scheduler.slurmctld"].status == SKIP
    # per node ONE round trip: the node checks and the managed files' digests together (nothing
    # drifted: no second read for texts); one to the controller for sinfo, one for all the srun jobs
    hosts = [h for h, _ in fake.calls]
    assert sorted(hosts) == ["node1", "node1", "node1", "node2", "node3"]
    assert all(checks["config.files"].status == PASS for checks in r.values())
    srun_calls = [c for h, c in fake.calls if "srun" in c]
    assert len(srun_calls) == 1 and all(f"-w {n} -p batch" in srun_calls[0] for n in ("node1", "node2", "node3"))
    # every check in the report belongs to the registry, in layer order
    known = {c.id for c in ALL_CHECKS}
    assert all(cid in known for checks in r.values() for cid in checks)


def test_drained_node_fails_state_and_is_not_sent_a_job(lab: Any) -> None:
    spec, path, fake = lab
    fake.sinfo["node2"][0] = "drained"
    fake.reasons["node2"] = "maintenance [alice@2026-05-01T09:00:00]"
    report = validate(Cluster.of(spec, path), transport=fake)
    r = results(report)
    assert report.exit_code == 1
    assert r["node2"]["scheduler.node_state"].status == FAIL
    assert r["node2"]["scheduler.node_state"].message == (
        "node2 is drained (reason: maintenance [alice@2026-05-01T09:00:00])"
    )
    assert r["node2"]["job.srun"].status == BLOCKED
    srun = next(c for _, c in fake.calls if "srun" in c)
    assert "-w node2" not in srun and "-w node3" in srun
    assert r["node3"]["job.srun"].status == PASS
    assert [(n, f.id) for n, f in report.failures()] == [("node2", "scheduler.node_state")]


def test_munge_stopped_on_node2(lab: Any) -> None:
    spec, path, fake = lab
    fake.outputs["node2"]["units"] = units({"munge.service": "inactive", "slurmd.service": "active"})
    report = validate(Cluster.of(spec, path), transport=fake)
    r = results(report)
    assert r["node2"]["scheduler.munge"].status == FAIL
    assert r["node2"]["scheduler.munge"].message == "munge.service is inactive (dead)"
    assert r["node2"]["scheduler.slurmd"].status == BLOCKED
    assert r["node2"]["job.srun"].status == BLOCKED
    assert r["node1"]["scheduler.munge"].status == PASS and r["node3"]["job.srun"].status == PASS


def test_munge_key_differs_on_one_node(lab: Any) -> None:
    spec, path, fake = lab
    fake.outputs["node3"]["munge_key"][2] = "__sha256=" + "6" * 64
    r = results(validate(Cluster.of(spec, path), transport=fake))
    assert r["node3"]["security.munge_key_identical"].status == FAIL
    assert r["node3"]["security.munge_key_identical"].message.startswith("munge key differs from node1's")
    assert r["node2"]["security.munge_key_identical"].status == PASS


def test_munge_key_world_readable(lab: Any) -> None:
    spec, path, fake = lab
    fake.outputs["node2"]["munge_key"][1] = "__stat=644|munge|munge|regular file|1024"
    r = results(validate(Cluster.of(spec, path), transport=fake))
    assert r["node2"]["security.munge_key"].status == FAIL
    assert r["node2"]["security.munge_key"].message == "/etc/munge/munge.key is 0644 munge:munge, want 0400 munge:munge"
    assert r["node2"]["security.munge_key_identical"].status == BLOCKED


def test_unreachable_node_is_a_failure_of_that_node(lab: Any) -> None:
    spec, path, fake = lab
    fake.unreachable.add("node3")
    report = validate(Cluster.of(spec, path), transport=fake)
    r = results(report)
    assert report.exit_code == 1
    conn = r["node3"]["connection.ssh"]
    assert conn.status == FAIL and "node3 unreachable" in conn.message and "Connection timed out" in conn.message
    assert r["node3"]["scheduler.munge"].status == BLOCKED
    assert r["node3"]["hardware.gpu_count"].status == BLOCKED
    # what the controller knows about node3 is still judged
    assert r["node3"]["scheduler.node_state"].status == PASS
    assert r["node3"]["job.srun"].status == BLOCKED
    assert r["node2"]["job.srun"].status == PASS


def test_nothing_reachable_means_could_not_run(lab: Any) -> None:
    spec, path, fake = lab
    fake.unreachable |= {"node1", "node2", "node3"}
    report = validate(Cluster.of(spec, path), transport=fake)
    assert report.exit_code == 2 and report.could_not_run and not report.ok
    r = results(report)
    assert r["node2"]["scheduler.node_state"].status == BLOCKED
    assert "cannot ask the controller: controller node1 unreachable" in r["node2"]["scheduler.node_state"].message


def test_srun_failure_is_reported(lab: Any) -> None:
    spec, path, fake = lab
    fake.srun_fail["node3"] = (
        "srun: error: Unable to create step for job 12: Invalid generic resource (gres) specification"
    )
    r = results(validate(Cluster.of(spec, path), transport=fake))
    assert r["node3"]["job.srun"].status == FAIL
    assert "exit 1" in r["node3"]["job.srun"].message and "Invalid generic resource" in r["node3"]["job.srun"].message


def test_checks_selection_pulls_dependencies_and_limit(lab: Any) -> None:
    spec, path, fake = lab
    report = validate(Cluster.of(spec, path), checks="security.munge_key_identical", limit="node[2-3]", transport=fake)
    assert [n.name for n in report.nodes] == ["node2", "node3"]
    assert {r.id for r in report.nodes[0].checks} == {
        "connection.ssh", "security.munge_key", "security.munge_key_identical"}  # fmt: skip
    assert not any("sinfo" in c for _, c in fake.calls)  # no controller query needed
    with pytest.raises(UnknownCheck, match=r"unknown check 'driver\.versoin'"):
        validate(Cluster.of(spec, path), checks="driver.versoin", transport=fake)
    with pytest.raises(SpecError, match=r"--limit: 'gpu\[01-02\]' matches no node of the spec"):
        validate(Cluster.of(spec, path), limit="gpu[01-02]", transport=fake)


def test_selection_by_layer_and_prefix() -> None:
    assert {c.id for c in resolve("driver")} >= {"driver.module", "driver.version", "connection.ssh"}
    assert {c.id for c in resolve("job")} >= {"job.srun", "job.pyxis", "scheduler.node_state", "scheduler.slurmd"}
    assert {c.id for c in resolve("gpu.*")} >= {"gpu.ecc", "driver.smi", "driver.module"}
    every = [c for c in ALL_CHECKS if c.id not in OPT_IN]  # opt-in checks (fabric.pairs) only where named
    assert resolve(None) == every and resolve("") == every


def test_gres_and_partitions_compared_with_the_spec(tmp_path: Path) -> None:
    def gpus(data: dict) -> None:
        data["node_groups"][1]["hardware"] = {
            **data["node_groups"][1]["hardware"],
            "gpu": {"model": "H100-80GB", "count": 1},
        }
        data["slurm"]["partitions"].append({"name": "gpu", "nodes": "workers"})

    spec, path = lab_spec(tmp_path, gpus)
    fake = FakeCluster(spec)
    fake.sinfo["node3"][2] = "gpu:h100:1(S:0)"
    r = results(validate(Cluster.of(spec, path), checks="scheduler", transport=fake))
    assert r["node2"]["scheduler.gres"].status == FAIL
    assert r["node2"]["scheduler.gres"].message == "GRES (none), the spec declares gpu:h100:1"
    assert r["node3"]["scheduler.gres"].status == PASS
    assert r["node2"]["scheduler.partitions"].status == FAIL
    assert r["node2"]["scheduler.partitions"].message == "in partitions batch, the spec says batch,gpu"
    assert r["node1"]["scheduler.partitions"].status == PASS


def test_wrong_driver_pin_on_gpu_less_nodes_is_honest(lab: Any, tmp_path: Path) -> None:
    def pin(data: dict) -> None:
        data["versions"]["driver"]["version"] = "535.288.01"
        data["node_groups"][1]["hardware"] = {
            **data["node_groups"][1]["hardware"],
            "gpu": {"model": "H100-80GB", "count": 1},
        }

    spec, path = lab_spec(tmp_path, pin)
    fake = FakeCluster(spec)
    for name in ("node2", "node3"):
        fake.outputs[name]["driver"] = ["__sysmod=", "__refcnt="]
        fake.outputs[name]["modules"] = ["snd 1 0 - Live 0x0", "__rc=0"]
        fake.outputs[name]["xid"] = ["__source=none"]
    r = results(validate(Cluster.of(spec, path), checks="driver,hardware", transport=fake))
    assert r["node2"]["driver.module"].status == FAIL
    assert "no NVIDIA GPU on the PCI bus" in r["node2"]["driver.module"].message
    assert r["node2"]["driver.version"].status == BLOCKED
    assert "535.288.01" not in r["node2"]["driver.version"].message  # no invented version comparison
    assert r["node1"]["driver.version"].status == SKIP  # node1 declares no GPU


def test_k8s_cluster_checks(tmp_path: Path) -> None:
    spec = spec_from(INVENTORIES / "k8s-gpu-operator.yaml")
    nodes = resolve_nodes(spec)
    worker = next(n for n in nodes if n.hardware.gpu)
    plane = next(n for n in nodes if not n.hardware.gpu and "k8s-control-plane" in {r.value for r in n.roles})
    data = cluster.ClusterData(spec, tmp_path / "s.yaml", nodes, kube_node=plane.name)

    def item(n: Any) -> dict[str, Any]:
        ready = {"type": "Ready", "status": "True" if n is not worker else "False", "reason": "KubeletNotReady"}
        return {"metadata": {"name": n.name}, "status": {"conditions": [ready], "allocatable": {"nvidia.com/gpu": "0"}}}

    items = [item(n) for n in nodes]
    pods = [{"metadata": {"name": "nvidia-device-plugin-x"}, "status": {"phase": "Pending"}},
            {"metadata": {"name": "nvidia-cuda-validator-y"}, "status": {"phase": "Succeeded"}}]  # fmt: skip
    text = "\n".join(["__section=nodes", json.dumps({"items": items}), "__rc=0",
                      "__section=pods", json.dumps({"items": pods}), "__rc=0"])  # fmt: skip
    cluster_k8s.apply_kube_query(data, text)
    assert cluster_k8s.k8s_ready(data, worker) == (FAIL, f"{worker.name} is not Ready: KubeletNotReady")
    assert cluster_k8s.k8s_ready(data, plane)[0] == PASS
    status, msg = cluster_k8s.k8s_allocatable(data, worker)
    assert status == FAIL and "expected" in msg
    status, msg = cluster_k8s.k8s_operator_pods(data, plane)
    assert status == FAIL and "nvidia-device-plugin-x (Pending" in msg
    assert cluster_k8s.gate_k8s_first_control_plane(spec, worker)
    data.kube_error = "kubectl not installed on x"
    assert cluster_k8s.k8s_ready(data, worker)[0] == BLOCKED
    assert "kubectl get nodes -o json" in cluster_k8s.kube_query("gpu-operator")


def test_known_hosts_plain_wildcard_port_and_hashed() -> None:
    salt = b"0123456789abcdef0123"
    digest = hmac.new(salt, b"10.0.0.5", hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()} ssh-ed25519 AAAA"
    text = "\n".join([
        "# comment", "node1,10.0.0.1 ssh-ed25519 AAAA", "*.example.org ecdsa-sha2-nistp256 AAAA", hashed,
        "[10.0.0.9]:2222 ssh-rsa AAAA", "@revoked 10.0.0.7 ssh-rsa AAAA", "!bad.example.org,*.org ssh-rsa BBBB",
    ])  # fmt: skip
    assert cluster.known_host_entries(text, "10.0.0.1") == ["ssh-ed25519"]
    assert cluster.known_host_entries(text, "gpu1.example.org") == ["ecdsa-sha2-nistp256", "ssh-rsa"]
    assert cluster.known_host_entries(text, "bad.example.org") == ["ecdsa-sha2-nistp256"]
    assert cluster.known_host_entries(text, "10.0.0.5") == ["ssh-ed25519"]
    assert cluster.known_host_entries(text, "[10.0.0.9]:2222") == ["ssh-rsa"]
    assert cluster.known_host_entries(text, "10.0.0.7") == []


def test_ssh_host_key_check(tmp_path: Path) -> None:
    spec, path = lab_spec(tmp_path)
    n2 = node(spec, "node2")
    data = cluster.ClusterData(spec, path, resolve_nodes(spec))
    assert cluster.ssh_host_keys(data, n2)[0] == PASS
    (tmp_path / "known_hosts").write_text("10.213.0.11 ssh-ed25519 AAAA\n")
    assert cluster.ssh_host_keys(data, n2) == (FAIL, f"{tmp_path / 'known_hosts'} has no host key for 10.213.0.12")
    spec2, path2 = lab_spec(tmp_path, lambda d: d["ssh"].pop("known_hosts"))
    status, msg = cluster.ssh_host_keys(cluster.ClusterData(spec2, path2, []), node(spec2, "node2"))
    assert status == FAIL and "spec.ssh.known_hosts is not set" in msg
    data.ssh_strict = False
    assert cluster.ssh_host_keys(data, n2) == (FAIL, "connections do not use StrictHostKeyChecking=yes")


def test_ssh_host_key_check_looks_up_where_ssh_connects(tmp_path: Path) -> None:
    """A vagrant node is reached at the address `vagrant ssh-config` gives: that is what must be pinned."""
    spec, path = lab_spec(tmp_path)
    n2 = node(spec, "node2")
    (tmp_path / "known_hosts").write_text("[192.168.121.7]:2222 ssh-ed25519 AAAA\n10.213.0.12 ssh-rsa BBBB\n")
    data = cluster.ClusterData(spec, path, resolve_nodes(spec), ssh_targets={"node2": ("192.168.121.7", 2222)})
    assert cluster.ssh_host_keys(data, n2) == (
        PASS,
        f"{tmp_path / 'known_hosts'} pins 192.168.121.7 (ssh-ed25519); StrictHostKeyChecking=yes",
    )
    data.ssh_targets = {"node2": ("192.168.121.8", 22)}
    assert cluster.ssh_host_keys(data, n2) == (FAIL, f"{tmp_path / 'known_hosts'} has no host key for 192.168.121.8")


def test_sinfo_flags_make_nodes_unusable(tmp_path: Path) -> None:
    spec, path = lab_spec(tmp_path)
    data = cluster.ClusterData(spec, path, resolve_nodes(spec))
    lines = ["node1|idle*|batch*|(null)", "node2|mixed|batch*|(null)", "node3|down*|batch*|(null)", "__rc=0"]
    data.sinfo = parse_sinfo_nodes(lines)
    assert cluster.node_state(data, node(spec, "node1")) == (FAIL, "node1 is idle*")
    assert cluster.node_state(data, node(spec, "node2")) == (PASS, "node2 is mixed")
    assert cluster.node_state(data, node(spec, "node3"))[0] == FAIL
    data.sinfo = parse_sinfo_nodes(output("slurm/sinfo_controller_down"))
    data.slurm_error = "sinfo on node1: controller down"
    assert cluster.node_state(data, node(spec, "node2"))[0] == BLOCKED


def test_srun_command_and_output_round_trip() -> None:
    cmd = cluster.srun_command([("node1", "batch"), ("node2", None), ("node3", "batch")])
    # One step per partition first, then a job of its own for each node that step did not prove.
    assert "timeout 10 srun -N2 --ntasks-per-node=1 -w node1,node3 -p batch -t 1" in cmd
    assert "timeout 10 srun -N1 --ntasks-per-node=1 -w node2 -t 1" in cmd
    assert "timeout 20 srun -N1 -n1 -w node1 -p batch -t 1" in cmd and "-w node2 -t 1" in cmd
    parsed = cluster.parse_srun_output("__node=node1\nnode1\n__rc=0\n__node=node2\nsrun: error: x\n__rc=1\n")
    assert parsed == {"node1": (0, "node1"), "node2": (1, "srun: error: x")}


def test_a_job_that_waited_for_its_node_passes_on_the_hostname_after_sruns_notes(tmp_path: Path) -> None:
    """The node was still completing the job before (a fresh run in the lab): srun printed its notes first."""
    spec, path = lab_spec(tmp_path)
    data = cluster.ClusterData(spec, path, resolve_nodes(spec))
    notes = "srun: job 2 queued and waiting for resources\nsrun: job 2 has been allocated resources\n"
    data.srun = {"node3": (0, notes + "node3"), "node2": (0, notes)}
    assert cluster.srun(data, node(spec, "node3")) == (PASS, "srun -w node3 hostname printed node3")
    assert cluster.srun(data, node(spec, "node2")) == (FAIL, "srun -w node2 hostname printed 'nothing'")


#: A stand-in for srun: every node in ``-w`` prints its hostname (node3 its FQDN), except the nodes
#: listed in $BROKEN, which fail the whole step; every call is logged to $SRUN_LOG.
FAKE_SRUN = """#!/bin/sh
echo "$*" >> "$SRUN_LOG"
while [ "$1" != "-w" ]; do shift; done
rc=0
for n in $(echo "$2" | tr , ' '); do
  case " $BROKEN " in *" $n "*) echo "srun: error: task launch failed on node $n" >&2; rc=1;; esac
done
[ $rc -eq 0 ] || exit $rc
for n in $(echo "$2" | tr , ' '); do [ "$n" = node3 ] && echo node3.lab.example || echo "$n"; done
"""


@pytest.mark.parametrize("broken", ["", "node2"])
def test_srun_script_runs_in_a_shell(tmp_path: Path, broken: str) -> None:
    """The generated script is valid sh: run it with a fake srun on PATH. A healthy cluster takes
    one srun per partition; a step that fails sends every node of it to a job of its own."""
    bindir, log = tmp_path / "bin", tmp_path / "srun.log"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "srun").chmod(0o755)
    targets = [("node1", "batch"), ("node2", "batch"), ("node3", "batch"), ("node4", None)]
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SRUN_LOG": str(log), "BROKEN": broken}
    cp = subprocess.run(["sh", "-c", cluster.srun_command(targets)], capture_output=True, text=True, env=env)
    parsed = cluster.parse_srun_output(cp.stdout)
    calls = log.read_text().splitlines()
    if not broken:
        assert parsed == {"node1": (0, "node1"), "node2": (0, "node2"), "node3": (0, "node3.lab.example"),
                          "node4": (0, "node4")}  # fmt: skip
        assert len(calls) == 2 and all("--ntasks-per-node=1" in c for c in calls)
    else:
        assert parsed["node2"] == (1, "srun: error: task launch failed on node node2")
        assert {n: parsed[n] for n in ("node1", "node3", "node4")} == {
            "node1": (0, "node1"), "node3": (0, "node3.lab.example"), "node4": (0, "node4")
        }  # fmt: skip
        singles = sorted(c.split("-w ")[1].split()[0] for c in calls if "-N1 -n1" in c)
        assert len(calls) == 5 and singles == ["node1", "node2", "node3"]  # node4's own partition passed


def test_srun_proof_never_names_a_file_outside_its_folder(tmp_path: Path) -> None:
    """Only host labels become file names: a line like ``../x`` or ``/etc/passwd`` in a step's
    output proves nothing and writes nothing."""
    bindir, log = tmp_path / "bin", tmp_path / "srun.log"
    bindir.mkdir()
    (bindir / "srun").write_text("#!/bin/sh\necho ../escaped; echo /tmp/x; echo 'node1 extra'; echo node1\n")
    (bindir / "srun").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SRUN_LOG": str(log), "TMPDIR": str(tmp_path)}
    cp = subprocess.run(["sh", "-c", cluster.srun_command([("node1", None)])], capture_output=True, text=True, env=env)
    assert cluster.parse_srun_output(cp.stdout) == {"node1": (0, "node1")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]  # the script's folder is gone too


def test_registry_is_consistent() -> None:
    assert registry_problems() == []
    assert len({c.id for c in ALL_CHECKS}) == len(ALL_CHECKS) >= 35


def test_ssh_argv_keeps_host_key_checking_on(tmp_path: Path) -> None:
    spec = spec_from(INVENTORIES / "slurm-h100.yaml")
    argv = SshTransport(Cluster.of(spec, tmp_path / "s.yaml")).argv(node(spec, "gpu001"))
    joined = " ".join(argv)
    # Every StrictHostKeyChecking setting in the command says yes.
    assert re.findall(r"StrictHostKeyChecking=(\w+)", joined) == ["yes"]
    assert "-o UserKnownHostsFile=" in joined and joined.endswith("-- 192.0.2.101")
    assert "-l ansible" in joined and "-o BatchMode=yes" in joined


def test_ssh_failure_messages() -> None:
    assert explain_ssh_failure("Host key verification failed.\r\n", 255).startswith("host key verification failed")
    assert explain_ssh_failure("root@x: Permission denied (publickey).", 255).startswith("SSH login refused")
    assert explain_ssh_failure("", 255).startswith("ssh exited with status 255 and no message: the node closed")
    assert explain_ssh_failure("", 1) == "ssh exited with status 1"


def _counting_transport(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failures: int, stderr: str) -> Path:
    """SshTransport whose "ssh" is a local shell: the first ``failures`` runs exit 255 with
    ``stderr`` and no output (as ssh does when the node hangs up), later ones run the command."""
    count = tmp_path / "runs"
    script = (
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}; "
        f'if [ "$n" -lt {failures} ]; then printf %s {shlex.quote(stderr)} >&2; exit 255; fi; sh -c "$0"'
    )
    monkeypatch.setattr(SshTransport, "argv", lambda self, node: ["sh", "-c", script])
    return count


def test_ssh_transport_tries_once_more_when_the_node_hung_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = spec_from(INVENTORIES / "slurm-h100.yaml")
    count = _counting_transport(monkeypatch, tmp_path, 1, "")
    done = SshTransport(Cluster.of(spec, tmp_path / "s.yaml")).run(node(spec, "gpu001"), "echo ran", timeout=30)
    assert (done.rc, done.stdout, count.read_text().strip()) == (0, "ran\n", "2")


@pytest.mark.parametrize(
    "stderr",
    ["", "Host key verification failed.", "u@h: Permission denied (publickey).", "ssh: connect to host h: No route"],
)
def test_ssh_transport_gives_up_after_one_more_try_or_at_once_for_a_refusal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stderr: str
) -> None:
    spec = spec_from(INVENTORIES / "slurm-h100.yaml")
    count = _counting_transport(monkeypatch, tmp_path, 5, stderr)
    done = SshTransport(Cluster.of(spec, tmp_path / "s.yaml")).run(node(spec, "gpu001"), "echo ran", timeout=30)
    assert done.rc == 255 and done.stdout == "" and done.stderr == stderr
    assert count.read_text().strip() == ("2" if not stderr else "1")


class LocalTransport:
    """Runs the remote command with sh on this machine: the real nodelocal over the real command line."""

    strict = True

    def run(self, node: Any, command: str, stdin: bytes | None = None, timeout: float = 60) -> Completed:
        cmd = command.replace("python3 - ", f"{shlex.quote(sys.executable)} - ", 1)
        cp = subprocess.run(["sh", "-c", cmd], input=stdin or b"", capture_output=True, timeout=timeout)
        return Completed(cp.returncode, cp.stdout.decode(), cp.stderr.decode(), 0.1)


def test_real_nodelocal_over_the_real_command_line(lab: Any) -> None:
    spec, path, _ = lab
    report = validate(
        Cluster.of(spec, path), checks="hardware,security.munge_key,scheduler.munge", limit="node2",
        transport=LocalTransport(),
    )  # fmt: skip
    r = results(report)["node2"]
    assert r["connection.ssh"].status == PASS, r["connection.ssh"].message
    # This machine's real PCI bus and munge key decide: the lab spec declares no GPU for node2.
    assert r["hardware.gpu_count"].status == (SKIP if nvidia_gpus_on_this_machine() == 0 else FAIL)
    assert (r["security.munge_key"].status, r["security.munge_key"].message) == local_munge_key_outcome()


def local_munge_key_outcome() -> tuple[str, str]:
    """What security.munge_key must say of this machine's /etc/munge/munge.key."""
    import grp
    import os
    import pwd
    import stat

    path = "/etc/munge/munge.key"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FAIL, f"{path} missing (or hidden from this user)"
    owner = pwd.getpwuid(st.st_uid).pw_name
    group = grp.getgrgid(st.st_gid).gr_name
    if (f"{stat.S_IMODE(st.st_mode):04o}", owner, group) == ("0400", "munge", "munge"):
        return PASS, f"{path} is 0400 munge:munge"
    return FAIL, f"{path} is {stat.S_IMODE(st.st_mode):04o} {owner}:{group}, want 0400 munge:munge"


def test_exclude_drops_checks_for_a_rolling_apply(lab: Any) -> None:
    """A node drained on purpose (rolling apply) is validated without scheduler.node_state."""
    spec, path, fake = lab
    fake.sinfo["node2"][0] = "drained"
    fake.reasons["node2"] = "gpuforge: rolling change"
    report = validate(Cluster.of(spec, path), limit="node2", exclude="scheduler.node_state", transport=fake)
    r = results(report)["node2"]
    assert "scheduler.node_state" not in r
    assert r["job.srun"].status == BLOCKED and "did not run" in r["job.srun"].message
    assert report.exit_code == 0, report.failures()
    assert "scheduler.munge" not in {c.id for c in resolve(None, exclude="scheduler.munge,driver")}
    with pytest.raises(UnknownCheck):
        resolve(None, exclude="nope")
