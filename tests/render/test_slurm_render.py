"""Rendering the example specs: golden files, determinism, Slurm specifics, secrets.

Golden files
------------
``golden/<spec>/<node>/<path>`` holds what ``render_cluster`` (secrets redacted) gives each
node of ``inventories/<spec>.yaml``, for every layer. Nodes whose files are identical (same
paths, bytes, modes and owners) share one directory: ``golden/<spec>.json`` lists every
node, which node's directory holds its files (``golden``), and the mode/owner/group/secret
of each file. So all 69 nodes of slurm-h100 are checked with a dozen directories.

Programs built from the package's own code (the health checker, the Slurm collector) are not
copied into the goldens: their golden file names the builder, and the test compares the
rendered bytes with a fresh build (the programs have tests of their own).

To rewrite them after an intended change::

    GPUFORGE_UPDATE_GOLDEN=1 python -m pytest tests/render/test_slurm_render.py

and review ``git diff tests/render/golden``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.render import render_cluster
from gpuforge.render.files import REDACTED, RenderedFile, Secrets
from gpuforge.render.health import HEALTH_PROGRAM
from gpuforge.render.monitoring import SLURM_METRICS_PROGRAM, slurm_metrics_program
from gpuforge.render.node_program import node_program
from gpuforge.render.slurm import gres_conf, node_lines, slurm_conf, topology_conf
from gpuforge.spec import Spec, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "inventories"
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = ["lab", "slurm-h100", "k8s-gpu-operator"]
UPDATE = os.environ.get("GPUFORGE_UPDATE_GOLDEN") == "1"
ENV = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}
GENERATED: dict[str, Callable[[], bytes]] = {HEALTH_PROGRAM: node_program, SLURM_METRICS_PROGRAM: slurm_metrics_program}


def golden_bytes(f: RenderedFile) -> bytes:
    """What the golden file holds: the file, or for a built program the name of its builder."""
    build = GENERATED.get(f.path)
    return f"built by {build.__module__}.{build.__name__}()\n".encode() if build else f.data


def example(name: str) -> Spec:
    return load_spec(INVENTORIES / f"{name}.yaml")


def _attrs(f: RenderedFile) -> dict[str, Any]:
    return {"mode": f.mode, "owner": f.owner, "group": f.group, "secret": f.secret}


#: A node whose files differ from an earlier node's in at most this many files (same paths and
#: attributes) keeps only those files in its own golden directory (e.g. its health.json).
MAX_OWN_FILES = 3


def _signature(files: list[RenderedFile]) -> dict[str, tuple[str, str]]:
    return {f.path: (json.dumps(_attrs(f), sort_keys=True), hashlib.sha256(golden_bytes(f)).hexdigest()) for f in files}


def build_manifest(name: str, rendered: dict[str, list[RenderedFile]]) -> dict[str, Any]:
    """Each node points at a golden node holding its files; ``own`` lists the paths (at most
    ``MAX_OWN_FILES``) whose content this node keeps in its own directory instead."""
    reps: list[tuple[str, dict[str, tuple[str, str]]]] = []
    nodes: dict[str, Any] = {}
    for node, files in rendered.items():
        sig = _signature(files)
        best: tuple[str, list[str]] | None = None
        for rep, rsig in reps:
            if set(rsig) != set(sig) or any(rsig[p][0] != sig[p][0] for p in sig):
                continue
            own = sorted(p for p in sig if rsig[p][1] != sig[p][1])
            if len(own) <= MAX_OWN_FILES and (best is None or len(own) < len(best[1])):
                best = (rep, own)
        if best is None:
            reps.append((node, sig))
            nodes[node] = {"golden": node, "files": {f.path: _attrs(f) for f in files}}
        else:
            nodes[node] = {"golden": best[0], "own": best[1]} if best[1] else {"golden": best[0]}
    return {"spec": f"inventories/{name}.yaml", "nodes": nodes}


def write_golden(name: str, rendered: dict[str, list[RenderedFile]]) -> None:
    shutil.rmtree(GOLDEN / name, ignore_errors=True)
    manifest = build_manifest(name, rendered)
    for node, entry in manifest["nodes"].items():
        keep = None if entry["golden"] == node else set(entry.get("own", []))
        for f in rendered[node]:
            if keep is not None and f.path not in keep:
                continue
            target = GOLDEN / name / node / f.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(golden_bytes(f))
    (GOLDEN / f"{name}.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _diff(path: str, want: bytes, got: bytes) -> str:
    lines = difflib.unified_diff(
        want.decode(errors="replace").splitlines(),
        got.decode(errors="replace").splitlines(),
        f"golden{path}",
        f"rendered{path}",
        lineterm="",
        n=1,
    )
    return "\n".join(list(lines)[:40])


@pytest.mark.parametrize("name", EXAMPLES)
def test_render_matches_golden(name: str) -> None:
    rendered = render_cluster(example(name))
    if UPDATE:
        write_golden(name, rendered)
    manifest_file = GOLDEN / f"{name}.json"
    assert manifest_file.is_file(), f"no golden files for {name}: run with GPUFORGE_UPDATE_GOLDEN=1"
    manifest = json.loads(manifest_file.read_text())
    assert list(manifest["nodes"]) == list(rendered), "the nodes of the spec changed"
    problems: list[str] = []
    used: set[Path] = set()
    for node, files in rendered.items():
        golden = manifest["nodes"][node]["golden"]
        want_attrs = manifest["nodes"][golden]["files"]
        got = {f.path: f for f in files}
        for path in sorted(set(want_attrs) - set(got)):
            problems.append(f"{node}: {path} is no longer rendered")
        for path in sorted(set(got) - set(want_attrs)):
            problems.append(f"{node}: {path} is new")
        own = set(manifest["nodes"][node].get("own", []))
        for path in sorted(set(got) & set(want_attrs)):
            file = GOLDEN / name / (node if path in own else golden) / path.lstrip("/")
            used.add(file)
            if _attrs(got[path]) != want_attrs[path]:
                problems.append(f"{node}: {path} attributes {_attrs(got[path])} != golden {want_attrs[path]}")
            want = file.read_bytes()
            if golden_bytes(got[path]) != want:
                problems.append(f"{node}: {path} differs (golden {golden})\n{_diff(path, want, got[path].data)}")
            elif path in GENERATED and got[path].data != GENERATED[path]():
                problems.append(f"{node}: {path} is not the program its builder makes")
    stray = sorted(str(p.relative_to(GOLDEN)) for p in (GOLDEN / name).rglob("*") if p.is_file() and p not in used)
    problems += [f"stray golden file {s}" for s in stray]
    hint = "\n(if intended: GPUFORGE_UPDATE_GOLDEN=1 python -m pytest tests/render/test_slurm_render.py)"
    assert not problems, "\n".join(problems[:20]) + hint


@pytest.mark.parametrize("name", EXAMPLES)
def test_golden_covers_every_node(name: str) -> None:
    manifest = json.loads((GOLDEN / f"{name}.json").read_text())
    for node, entry in manifest["nodes"].items():
        golden = entry["golden"]
        assert "files" in manifest["nodes"][golden], f"{node} points at {golden}, which has no files"
        assert (GOLDEN / name / golden).is_dir() or not manifest["nodes"][golden]["files"]
        for path in entry.get("own", []):
            assert (GOLDEN / name / node / path.lstrip("/")).is_file(), f"{node} keeps {path} but has no file"


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", EXAMPLES)
def test_render_is_deterministic_in_process(name: str) -> None:
    spec = example(name)
    first = {n: [(f.path, f.data, _attrs(f)) for f in fs] for n, fs in render_cluster(spec).items()}
    again = {n: [(f.path, f.data, _attrs(f)) for f in fs] for n, fs in render_cluster(example(name)).items()}
    assert first == again


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_render_is_deterministic_across_processes(tmp_path: Path) -> None:
    """Two processes with different hash seeds (set iteration order) write the same bytes."""
    trees = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        result = subprocess.run(
            [sys.executable, "-m", "gpuforge", "render", "inventories/slurm-h100.yaml", "-o", str(out)],
            cwd=REPO,
            env={**ENV, "PYTHONHASHSEED": seed, "GPUFORGE_STATE_DIR": str(tmp_path / "state")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        trees.append(_tree(out))
    assert trees[0] == trees[1]


def test_files_are_sorted_by_path() -> None:
    for files in render_cluster(example("slurm-h100")).values():
        paths = [f.path for f in files]
        assert paths == sorted(paths)
        assert len(paths) == len(set(paths)), "a node gets each path once"
        assert all(p.startswith("/") for p in paths)


# --------------------------------------------------------------------------- slurm-h100 specifics


@pytest.fixture(scope="module")
def h100() -> Spec:
    return example("slurm-h100")


@pytest.fixture(scope="module")
def h100_files(h100: Spec) -> dict[str, dict[str, RenderedFile]]:
    return {node: {f.path: f for f in files} for node, files in render_cluster(h100).items()}


def _text(f: RenderedFile) -> str:
    assert isinstance(f.content, str)
    return f.content


def test_slurm_conf_node_lines(h100: Spec) -> None:
    conf = slurm_conf(h100).splitlines()
    nodes = [line for line in conf if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=gpu[001-060] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2000000 "
        "Gres=gpu:h100:8 Feature=gpu State=UNKNOWN",
        "NodeName=gpu[061-064] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2000000 "
        "Gres=gpu:1g.10gb:36,gpu:2g.20gb:4,gpu:3g.40gb:4 Feature=mig State=UNKNOWN",
    ]
    assert nodes == node_lines(h100)


def test_mig_gres_counts(h100: Spec) -> None:
    """GPUs 0-3: 7 x 1g.10gb each; GPUs 4-7: 3g.40gb + 2g.20gb + 2 x 1g.10gb each; no whole GPU."""
    line = next(x for x in node_lines(h100) if x.startswith("NodeName=gpu[061-064]"))
    gres = dict(item.rsplit(":", 1) for item in line.split(" Gres=")[1].split()[0].split(","))
    assert gres == {"gpu:1g.10gb": "36", "gpu:2g.20gb": "4", "gpu:3g.40gb": "4"}
    assert "gpu:h100" not in line


def test_slurm_conf_settings(h100: Spec) -> None:
    conf = slurm_conf(h100).splitlines()
    for line in [
        "ClusterName=hopper",
        "SlurmctldHost=ctl01",
        "SlurmctldParameters=enable_configless",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SelectType=select/cons_tres",
        "GresTypes=gpu",
        "TopologyPlugin=topology/tree",
        "PreemptType=preempt/qos",
        "PreemptMode=REQUEUE",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=db01",
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStorageTRES=gres/gpu",
        "HealthCheckProgram=/usr/local/sbin/gpuforge-health",
        "HealthCheckInterval=300",
    ]:
        assert line in conf, line
    assert conf[0].startswith("# Managed by gpuforge")
    partitions = [x for x in conf if x.startswith("PartitionName=")]
    assert partitions == [
        "PartitionName=gpu Nodes=gpu[001-060] Default=YES MaxTime=2-00:00:00 DefaultTime=1:00:00 "
        "PriorityTier=10 OverSubscribe=NO State=UP",
        "PartitionName=mig Nodes=gpu[061-064] Default=NO MaxTime=12:00:00 PriorityTier=1 OverSubscribe=NO State=UP",
        "PartitionName=debug Nodes=gpu[001-002] Default=NO MaxTime=30:00 MaxNodes=2 PriorityTier=20 "
        "OverSubscribe=NO State=UP",
    ]
    # every key is set once
    keys = [x.split("=", 1)[0] for x in conf if "=" in x and not x.startswith(("#", "NodeName", "PartitionName"))]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_topology_conf(h100: Spec) -> None:
    assert topology_conf(h100).splitlines()[1:] == [
        "SwitchName=leaf1 Nodes=gpu[001-032]",
        "SwitchName=leaf2 Nodes=gpu[033-064]",
        "SwitchName=spine Switches=leaf[1-2]",
    ]


def test_gres_conf_explicit_lines(h100: Spec) -> None:
    """slurm-h100 says its Slurm carries the NVML plugin: AutoDetect=nvml per GPU group; whole GPUs keep
    their File= lines (a sanity check), MIG slices have none (Slurm finds them and their caps files)."""
    lines = gres_conf(h100).splitlines()
    assert lines[1:] == [
        "AutoDetect=off",
        "NodeName=gpu[001-060] AutoDetect=nvml",
        "NodeName=gpu[001-060] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=gpu[061-064] AutoDetect=nvml",
    ]


def test_gres_conf_with_mps() -> None:
    spec = parse_spec(
        (INVENTORIES / "slurm-h100.yaml").read_text().replace("  mps:\n    enabled: false", "  mps:\n    enabled: true")
    )
    lines = gres_conf(spec).splitlines()
    assert "NodeName=gpu[001-060] Name=mps Count=800 File=/dev/nvidia[0-7]" in lines
    assert not any("Name=mps" in x and "gpu[061-064]" in x for x in lines), "no MPS on MIG nodes"
    assert "GresTypes=gpu,mps" in slurm_conf(spec).splitlines()


def test_configless_files_by_role(h100_files: dict[str, dict[str, RenderedFile]]) -> None:
    ctl, login, gpu, db = h100_files["ctl01"], h100_files["login01"], h100_files["gpu001"], h100_files["db01"]
    for path in ("/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/topology.conf"):
        assert path in ctl and path in login
        assert path not in gpu, "configless compute nodes fetch their config from slurmctld"
    assert _text(gpu["/etc/default/slurmd"]).endswith('SLURMD_OPTIONS="--conf-server ctl01"\n')
    assert "/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf" in gpu
    assert "required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so" in _text(ctl["/etc/slurm/plugstack.conf"])
    assert not any(p.startswith("/etc/slurm/") and p != "/etc/slurm/slurmdbd.conf" for p in db)
    assert _text(ctl["/etc/slurm/slurm.conf"]) == _text(login["/etc/slurm/slurm.conf"])


def test_lab_pushed_config() -> None:
    files = {node: {f.path: f for f in fs} for node, fs in render_cluster(example("lab")).items()}
    conf = _text(files["node1"]["/etc/slurm/slurm.conf"])
    for node in ("node1", "node2", "node3"):
        assert _text(files[node]["/etc/slurm/slurm.conf"]) == conf, "pushed: every node has the same slurm.conf"
        assert _text(files[node]["/etc/default/slurmd"]).endswith('SLURMD_OPTIONS=""\n')
        assert "/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf" not in files[node]
    assert "ProctrackType=proctrack/linuxproc" in conf
    assert "SlurmctldParameters=enable_configless" not in conf
    assert "NodeName=node1 CPUs=1 Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=1000 Feature=ctl" in conf
    assert "PartitionName=batch Nodes=node[1-3] Default=YES MaxTime=1:00:00" in conf
    assert "GresTypes" not in conf, "no GPUs in the lab"


# --------------------------------------------------------------------------- secrets

PASSWORD = "s3cr3t-db-password-for-test"
MUNGE_KEY = bytes(range(256)) * 4


def test_slurmdbd_conf_is_a_redacted_secret_file(h100_files: dict[str, dict[str, RenderedFile]]) -> None:
    dbd = h100_files["db01"]["/etc/slurm/slurmdbd.conf"]
    assert (dbd.mode, dbd.owner, dbd.group, dbd.secret) == ("0600", "slurm", "slurm", True)
    text = _text(dbd)
    assert f"StoragePass={REDACTED}" in text.splitlines()
    assert "DbdHost=db01" in text and "StorageLoc=slurm_acct_db" in text
    holders = [(n, p) for n, fs in h100_files.items() for p in fs if p.endswith("slurmdbd.conf")]
    assert holders == [("db01", "/etc/slurm/slurmdbd.conf")]


def test_real_secrets_only_in_secret_files(h100: Spec) -> None:
    rendered = render_cluster(h100, Secrets(slurmdbd_db_password=PASSWORD, munge_key=MUNGE_KEY))
    holders = []
    for node, files in rendered.items():
        for f in files:
            if MUNGE_KEY in f.data:
                assert f.path == "/etc/munge/munge.key" and f.data == MUNGE_KEY, f"munge key in {node}:{f.path}"
                assert f.secret and (f.mode, f.owner, f.group) == ("0400", "munge", "munge"), f"{node}:{f.path}"
            if PASSWORD.encode() in f.data:
                assert f.secret and f.mode == "0600", f"{node}:{f.path} holds the password but is not secret"
                holders.append((node, f.path))
            if not f.secret:
                assert REDACTED.encode() not in f.data
    assert holders == [("db01", "/etc/slurm/slurmdbd.conf")]


def test_render_cli_writes_redacted_files(tmp_path: Path) -> None:
    """`gpuforge render` writes every node's files and never a real secret, even with a secret store."""
    state = tmp_path / "state"
    secrets = state / "hopper" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "munge.key").write_bytes(MUNGE_KEY)
    (secrets / "slurmdbd-db-password").write_text(PASSWORD)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "gpuforge", "render", "inventories/slurm-h100.yaml", "-o", str(out)],
        cwd=REPO,
        env={**ENV, "GPUFORGE_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    tree = _tree(out)
    assert len(tree.pop(".gpuforge-render").split()) == 69  # the node folders this render wrote
    rendered = render_cluster(example("slurm-h100"))
    expected = {f"{node}/{f.path.lstrip('/')}": f.data for node, files in rendered.items() for f in files}
    assert tree == expected
    assert f"wrote {len(expected)} files for 69 nodes" in result.stdout
    for path, data in tree.items():
        assert MUNGE_KEY not in data and MUNGE_KEY[:64] not in data, path
        assert PASSWORD.encode() not in data, path
        if path.endswith("munge.key"):  # every Slurm node's key: the placeholder, never the key
            assert data == REDACTED.encode(), path
    assert REDACTED.encode() in tree["db01/etc/slurm/slurmdbd.conf"]
    # the secret store is read by nothing here, and left as it was
    assert (secrets / "munge.key").read_bytes() == MUNGE_KEY
    assert sorted(p.name for p in secrets.iterdir()) == ["munge.key", "slurmdbd-db-password"]


def test_render_cli_creates_no_secrets(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = subprocess.run(
        [sys.executable, "-m", "gpuforge", "render", "inventories/lab.yaml", "-o", str(tmp_path / "out")],
        cwd=REPO,
        env={**ENV, "GPUFORGE_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert not state.exists(), "render must not generate secrets"
    assert (tmp_path / "out" / "node1" / "etc" / "slurm" / "slurmdbd.conf").is_file()


def test_render_cli_refuses_a_bad_spec(tmp_path: Path) -> None:
    bad = REPO / "tests" / "spec" / "bad" / "switch_cycle.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "gpuforge", "render", str(bad), "-o", str(tmp_path / "out")],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "switch 'spine' is in a cycle" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
