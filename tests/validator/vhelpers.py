"""Shared data for the validator tests: fact fixtures, node configs and ready-made node outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuforge.render.node_program import node_program
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node
from gpuforge.validator.node import execute
from gpuforge.validator.node.framework import NodeContext, Result
from gpuforge.validator.node.inputs import READ_MANAGED

REPO = Path(__file__).resolve().parents[2]
FACT_FIXTURES = REPO / "tests" / "facts" / "fixtures"
INVENTORIES = REPO / "inventories"


def fixture(rel: str) -> dict[str, Any]:
    """A facts fixture (``nvidia/smi_gpus_8x_h100_hgx``)."""
    data: dict[str, Any] = json.loads((FACT_FIXTURES / f"{rel}.json").read_text())
    return data


def output(rel: str) -> list[str]:
    return list(fixture(rel)["output"])


def gpu_cfg(
    count: int = 8,
    model: str = "H100-80GB",
    nvswitch: bool = True,
    driver: str | None = "550.127.05",
    ecc_expected: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """A GPU compute node's health config (as health_config would write it)."""
    cfg: dict[str, Any] = {
        "node": "gpu001",
        "gpu": {"count": count, "model": model, "gres_type": "h100",
                "pci_device_ids": ["2330", "2331", "2322", "2324"], "nvswitch": nvswitch,
                "ecc_expected": ecc_expected},
        "driver_version": driver,
        "slurm": None,
        "dcgm": {"enabled": True, "diag_level": 0, "exporter": False, "exporter_port": 9400, "counters": []},
        "node_exporter": {"enabled": False, "port": 9100},
    }  # fmt: skip
    cfg.update(extra)
    return cfg


def slurm_cfg(**slurm: Any) -> dict[str, Any]:
    """A GPU-less Slurm compute node."""
    s = {"compute": True, "controller": False, "login": False, "accounting_db": False, "pyxis": False,
         "munge_key": "/etc/munge/munge.key", "slurmdbd_conf": "/etc/slurm/slurmdbd.conf"}  # fmt: skip
    s.update(slurm)
    return {"node": "node2", "gpu": None, "driver_version": None, "slurm": s,
            "node_exporter": {"enabled": False, "port": 9100}}  # fmt: skip


def units(states: dict[str, str]) -> list[str]:
    """``systemctl show`` output (the ``systemd.unit_states`` reading's format) for unit -> ActiveState."""
    lines = [f"__units={' '.join(states)}"]
    for name, active in states.items():
        if active == "not-found":
            lines += [f"Id={name}", "LoadState=not-found", "ActiveState=inactive", "SubState=dead", ""]
        else:
            sub = "running" if active == "active" else "dead"
            lines += ["MainPID=1", f"Id={name}", "LoadState=loaded", f"ActiveState={active}", f"SubState={sub}",
                      "UnitFileState=enabled", ""]  # fmt: skip
    return [*lines, "__rc=0"]


def driver_lines(version: str = "550.127.05") -> list[str]:
    return [
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Sep 24 15:24:32 UTC 2024",
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)",
        f"__sysmod={version}",
        "__refcnt=18",
    ]


def remapped_ok(n: int = 8) -> list[str]:
    return [f"00000000:{0x0D + i:02X}:00.0, 0, 0, No, No" for i in range(n)] + ["__rc=0"]


def hgx_outputs(**override: list[str]) -> dict[str, list[str]]:
    """A healthy 8 x H100 HGX node (real captures where the facts have them)."""
    outputs = {
        "os_release": output("platform/os_release_debian12_x86_64"),
        "lspci": output("nvidia/pci_hgx_h100_8gpu_4nvswitch"),
        "sysfs_pci": ["__rc=0"],
        "smi": output("nvidia/smi_gpus_8x_h100_hgx"),
        "driver": driver_lines(),
        "modules": output("nvidia/kernel_modules_nvidia_stack"),
        "remapped": remapped_ok(),
        "nvlink": output("nvidia/nvlink_h100_hgx_all_active"),
        "topo": output("nvidia/topo_hgx_h100_nv18_all_pairs"),
        "xid": output("nvidia/xid_none"),
        "units": units({"nvidia-fabricmanager.service": "active"}),
    }
    outputs.update(override)
    return outputs


def run(cfg: dict[str, Any], outputs: dict[str, list[str]], ids: list[str] | None = None) -> dict[str, Result]:
    """Run the node checks on recorded outputs; results by id. Probes not given must not run."""
    ctx = StrictContext(cfg, outputs)
    results, _ = execute.run_node_checks(cfg, ids, ctx=ctx)
    return {r.id: r for r in results}


class StrictContext(NodeContext):
    """A NodeContext that refuses to touch the machine running the tests."""

    def _run(self, key: str) -> list[str]:
        raise AssertionError(f"probe {key!r} was not recorded for this test")


def spec_from(path: str | Path, mutate: Any = None) -> Spec:
    """A spec file, optionally changed (``mutate(data)``) before parsing."""
    import yaml

    from tests import yaml_text

    data = yaml.safe_load(Path(path).read_text())
    if mutate:
        mutate(data)
    return parse_spec(yaml_text.dump(data))


def node(spec: Spec, name: str) -> Node:
    return next(n for n in resolve_nodes(spec) if n.name == name)


# --------------------------------------------------------------------------- a fake cluster transport

KEY_SHA = "5" * 64
NODE_METRICS = ["# HELP node_load1 1m load average.", "# TYPE node_load1 gauge", "node_load1 0.02", "__rc=0"]


def lab_node_outputs(n: Node) -> dict[str, list[str]]:
    """What a healthy, GPU-less lab node answers (inventories/lab.yaml applied)."""
    from gpuforge.spec import Role

    states = {"munge.service": "active"}
    if n.has(Role.COMPUTE):
        states["slurmd.service"] = "active"
    if n.has(Role.CONTROLLER):
        states["slurmctld.service"] = "active"
    if n.has(Role.ACCOUNTING_DB):
        states.update({"slurmdbd.service": "active", "mariadb.service": "active"})
    return {
        "os_release": output("platform/os_release_debian12_x86_64"),  # the lab runs Debian 12 on x86_64
        # one CPU and 2000 MiB, the lab spec's figures (1 x 1 x 1, RealMemory 1000) and more memory
        "hardware": ["__section=cpu", "cpu0 1 0 0", "__section=memory", "MemTotal:        2048000 kB", "__rc=0"],
        "lspci": output("nvidia/pci_no_nvidia_device"),
        "units": units(states),
        "munge": ["STATUS:          Success (0)", "__rc=0"],
        "munge_key": ["__file=/etc/munge/munge.key", "__stat=400|munge|munge|regular file|1024", f"__sha256={KEY_SHA}"],
        "slurmdbd_conf": ["__file=/etc/slurm/slurmdbd.conf", "__stat=600|slurm|slurm|regular file|500", "__sha256=1"],
        "node_exporter": NODE_METRICS,
        "srun_help": ["Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]", "__rc=0"],
        "slurm_version": slurm_version_lines(n),
    }


def slurm_version_lines(n: Node, version: str = "22.05.8", running: str | None = None) -> list[str]:
    """What the ``slurm.version`` reading prints on a lab node (Debian 12's build: ``slurm-wlm``); its
    daemons run ``running`` (default: ``version``)."""
    from gpuforge.spec import Role

    lines = ["__bin=sinfo", f"slurm-wlm {version}"]
    lines += ["__bin=slurmd", f"slurm-wlm {version}"] if n.has(Role.COMPUTE) else []
    lines += ["__bin=slurmctld", f"slurm-wlm {version}"] if n.has(Role.CONTROLLER) else []
    lines += ["__bin=slurmdbd", f"slurm-wlm {version}"] if n.has(Role.ACCOUNTING_DB) else []
    if n.has(Role.COMPUTE):
        lines += ["__running=slurmd", f"Version                  = {running or version}"]
    if n.has(Role.CONTROLLER):
        lines += ["__running=slurmctld", f"SLURM_VERSION           = {running or version}"]
        lines += [f"Slurmctld(primary) at {n.name} is UP"]
    return [*lines, "__done=1"]


class FakeCluster:
    """A Transport that answers like a running cluster; tests break it in place."""

    strict = True

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.outputs = {n.name: lab_node_outputs(n) for n in resolve_nodes(spec)}
        self.sinfo = {n.name: ["idle", "batch*", "(null)"] for n in resolve_nodes(spec)}
        self.reasons: dict[str, str] = {}
        self.unreachable: set[str] = set()
        self.srun_fail: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.files: dict[str, dict[str, tuple[str, str, str, str, str | None]]] = {}
        """Per node, the managed files as the node has them: path -> (sha256, mode, owner, group, text);
        built from what the spec renders (a converged node) the first time a node is read."""

    def run(self, node: Node, command: str, stdin: bytes | None = None, timeout: float = 60) -> Any:
        import base64
        import shlex

        from gpuforge.validator.runner import Completed

        self.calls.append((node.name, command))
        if node.name in self.unreachable:
            return Completed(255, "", f"ssh: connect to host {node.ssh_target} port 22: Connection timed out\r\n", 10.0)
        if command.startswith("python3 - "):
            assert stdin == node_program()
            args = shlex.split(command)[2:]
            cfg = json.loads(base64.b64decode(args[args.index("--config-b64") + 1]))
            ids = args[args.index("--checks") + 1].split(",")
            outputs = dict(self.outputs[node.name])
            if cfg.get(READ_MANAGED):  # the node's managed files as the node program reads them
                outputs["managed_files"] = self.digest_lines(node, [e["path"] for e in cfg["config_files"]])
            ctx = StrictContext(cfg, outputs)
            results, ctx = execute.run_node_checks(cfg, ids, ctx=ctx)
            doc = {"node": node.name, "ok": True, "results": [r.to_dict() for r in results], "data": ctx.data}
            return Completed(0, "some banner\n" + json.dumps(doc) + "\n", "", 0.05)
        if "__section=sinfo" in command:
            lines = ["__section=sinfo"]
            lines += [f"{name}|{s}|{p}|{g}" for name, (s, p, g) in self.sinfo.items()]
            lines += ["__rc=0", "__section=scontrol"]
            for name, (s, _, _) in self.sinfo.items():
                reason = f" Reason={self.reasons[name]}" if name in self.reasons else ""
                lines.append(f"NodeName={name} Arch=x86_64 State={s.upper()} Partitions=batch{reason}")
            lines += ["__rc=0", "__section=sacctmgr", self.spec.cluster.name, "__rc=0"]
            return Completed(0, "\n".join(lines) + "\n", "", 0.05)
        if "__sha256=" in command or "base64 -w0" in command:
            return Completed(0, self.file_readings(node, command), "", 0.02)
        if "srun -N1" in command:
            import re

            out = []
            for name in re.findall(r"-w (\S+)", command):
                if name in self.srun_fail:
                    out += [f"__node={name}", self.srun_fail[name], "__rc=1"]
                else:
                    out += [f"__node={name}", name, "__rc=0"]
            return Completed(0, "\n".join(out) + "\n", "", 0.3)
        raise AssertionError(f"unexpected command on {node.name}: {command[:80]}")

    def node_files(self, node: Node) -> dict[str, tuple[str, str, str, str, str | None]]:
        """The node's managed files (converged: exactly as rendered) that tests change in place."""
        if node.name not in self.files:
            import hashlib

            from gpuforge.render import render_node

            self.files[node.name] = {
                f.path: (hashlib.sha256(f.data).hexdigest(), f.mode.lstrip("0"), f.owner, f.group,
                         None if f.secret else f.data.decode("utf-8", "replace"))
                for f in render_node(self.spec, node)
            }  # fmt: skip
        return self.files[node.name]

    def digest_lines(self, node: Node, paths: list[str]) -> list[str]:
        """What files.managed prints for ``paths`` of the node (one stat, one sha256sum)."""
        have = self.node_files(node)
        out = [f"__missing={p}" for p in paths if p not in have]
        out += [f"__stat={p}|{have[p][1]}|{have[p][2]}|{have[p][3]}|regular file|1" for p in paths if p in have]
        return out + [f"{have[p][0]}  {p}" for p in paths if p in have]

    def file_readings(self, node: Node, command: str) -> str:
        """What files.texts prints for the node's managed files."""
        import shlex

        paths = shlex.split(command.split(";", 1)[0].removeprefix("for p in "))
        return self.readings(node, paths, texts="base64 -w0" in command)

    def readings(self, node: Node, paths: list[str], texts: bool) -> str:
        import base64

        have = self.node_files(node)
        out = []
        for p in paths:
            if p not in have:
                out.append(f"__missing={p}")
                continue
            sha, mode, owner, group, text = have[p]
            if texts:
                out += [f"__file={p}", base64.b64encode((text or "").encode()).decode()]
            else:
                out += [f"__file={p}", f"__stat={mode}|{owner}|{group}|regular file|1", f"__sha256={sha}"]
        return "\n".join(out) + "\n"


def lab_spec(tmp_path: Path, mutate: Any = None) -> tuple[Spec, Path]:
    """inventories/lab.yaml with a known_hosts file (under tmp_path) pinning every node."""
    import yaml

    from tests import yaml_text

    data = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    kh = tmp_path / "known_hosts"
    lines = []
    data["ssh"]["known_hosts"] = str(kh)
    if mutate:
        mutate(data)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml_text.dump(data, sort_keys=False))
    spec = parse_spec(path.read_text())
    for n in resolve_nodes(spec):
        lines.append(f"{n.ssh_target} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{n.name}")
    kh.write_text("\n".join(lines) + "\n")
    return spec, path


def nvidia_gpus_on_this_machine() -> int:
    """NVIDIA GPUs on this machine's PCI bus, read by the project's own ``nvidia.host`` reading (sysfs)."""
    import subprocess

    from gpuforge.probes.nvidia_host import nvidia_host_command, parse_nvidia_host

    out = subprocess.run(["bash", "-c", nvidia_host_command()], capture_output=True, text=True, timeout=60).stdout
    return len(parse_nvidia_host(out.splitlines()).gpus)


def munge_key_is_right_here(path: str = "/etc/munge/munge.key") -> bool:
    """This machine's munge key exists as 0400 munge:munge (what security.munge_key passes on)."""
    import grp
    import os
    import pwd
    import stat

    try:
        st = os.stat(path)
        owner, group = pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        return False
    return stat.S_IMODE(st.st_mode) == 0o400 and (owner, group) == ("munge", "munge")
