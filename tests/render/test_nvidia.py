"""NVIDIA host stack renderers, checked against upstream data files and tool behaviour.

Upstream files are read from ``../shared/reference/upstream/`` beside the repository
(see its SOURCES.md); the tests that need them skip with a reason when it is absent.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.render import nvidia
from gpuforge.render.files import Secrets
from gpuforge.spec import SpecError, dcgm, resolve_nodes
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.model import Spec
from tests.helpers import UPSTREAM, inventory, needs_upstream, variant

#: A compute group's CPU and memory figures (its Slurm NodeName line never has a default).
FIGURES = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}

SECRETS = Secrets.redacted()
CRI = "io.containerd.grpc.v1.cri"


def node(spec: Spec, name: str) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == name)


def files_of(spec: Spec, name: str) -> dict[str, str]:
    return {f.path: str(f.content) for f in nvidia.nvidia_files(spec, node(spec, name), SECRETS)}


# --------------------------------------------------------------------------- containerd

# What `nvidia-ctk runtime configure --runtime=containerd` writes for config version 2
# when it has no runc entry to copy options from: the defaults set in AddRuntime of
# NVIDIA/nvidia-container-toolkit pkg/config/engine/containerd/config.go (runtime_type,
# runtime_root, runtime_engine, privileged_without_host_devices, options.BinaryName), with
# SystemdCgroup = true as in the dry-run output quoted in NVIDIA/nvidia-container-toolkit
# PR #497 (--runtime-config-override) and confirmed in NVIDIA/nvidia-docker issue #1788.
# --set-as-default adds plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name.
NVIDIA_CTK_RUNTIME = {
    "privileged_without_host_devices": False,
    "runtime_engine": "",
    "runtime_root": "",
    "runtime_type": "io.containerd.runc.v2",
    "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True},
}


def _cri(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["plugins"][CRI]["containerd"]


@pytest.mark.parametrize("default", [False, True])
def test_containerd_dropin_is_what_nvidia_ctk_writes(default: bool) -> None:
    spec = variant("slurm-h100", lambda d: d["container_runtime"].update(nvidia_default=default))
    doc = tomllib.loads(nvidia.containerd_nvidia_dropin(spec))
    assert doc["version"] == 2
    assert set(doc) == {"version", "plugins"}
    assert set(doc["plugins"]) == {CRI}
    assert _cri(doc)["runtimes"]["nvidia"] == NVIDIA_CTK_RUNTIME
    if default:
        assert _cri(doc)["default_runtime_name"] == "nvidia"
    else:
        assert "default_runtime_name" not in _cri(doc)


def test_containerd_main_config() -> None:
    doc = tomllib.loads(nvidia.containerd_config())
    assert doc["version"] == 2
    assert doc["imports"] == ["/etc/containerd/conf.d/*.toml"]
    assert nvidia.CONTAINERD_NVIDIA_DROPIN.startswith("/etc/containerd/conf.d/")
    assert nvidia.CONTAINERD_NVIDIA_DROPIN.endswith(".toml")
    runc = _cri(doc)["runtimes"]["runc"]
    assert runc == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert _cri(doc)["default_runtime_name"] == "runc"


def _merge_v1(main: dict[str, Any], dropin: dict[str, Any]) -> dict[str, Any]:
    """containerd 1.x import merge: a plugin section of the drop-in replaces the main one
    (containerd/containerd issues #5837 and #7982)."""
    out = dict(main)
    out["plugins"] = {**main.get("plugins", {}), **dropin.get("plugins", {})}
    return out


def merge_deep(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """containerd 2.x import merge: keys merged recursively, later file wins."""
    out = dict(a)
    for key, value in b.items():
        out[key] = merge_deep(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize("default", [False, True])
@pytest.mark.parametrize("merge", [_merge_v1, merge_deep], ids=["containerd1.x", "containerd2.x"])
def test_containerd_effective_config(default: bool, merge: Callable[..., dict[str, Any]]) -> None:
    """After containerd merges the drop-in, both runtimes exist with SystemdCgroup and the
    default runtime names an existing runtime (CRI refuses to load otherwise)."""
    spec = variant("slurm-h100", lambda d: d["container_runtime"].update(nvidia_default=default))
    main = tomllib.loads(nvidia.containerd_config())
    merged = merge(main, tomllib.loads(nvidia.containerd_nvidia_dropin(spec)))
    cri = _cri(merged)
    assert set(cri["runtimes"]) == {"nvidia", "runc"}
    for runtime in cri["runtimes"].values():
        assert runtime["runtime_type"] == "io.containerd.runc.v2"
        assert runtime["options"]["SystemdCgroup"] is True
    assert cri.get("default_runtime_name", "runc") == ("nvidia" if default else "runc")


# --------------------------------------------------------------------------- docker


@pytest.mark.parametrize("default", [False, True])
def test_docker_daemon_json(default: bool) -> None:
    spec = variant("slurm-h100", lambda d: d["container_runtime"].update(engine="docker", nvidia_default=default))
    text = files_of(spec, "gpu001")[nvidia.DOCKER_DAEMON_JSON]
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert data["runtimes"] == {"nvidia": {"args": [], "path": "/usr/bin/nvidia-container-runtime"}}
    assert data["exec-opts"] == ["native.cgroupdriver=systemd"]
    assert data.get("default-runtime") == ("nvidia" if default else None)
    assert nvidia.CONTAINERD_CONFIG not in files_of(spec, "gpu001")


def test_docker_without_gpu_has_no_nvidia_runtime() -> None:
    def cpu_nodes_with_docker(d: dict[str, Any]) -> None:  # (Kubernetes refuses Docker Engine: a Slurm cluster)
        d["container_runtime"].update(engine="docker", nvidia_default=True)
        d["node_groups"].append(
            {"name": "cpu", "hosts": "cpu01", "address_start": "192.0.2.250", "roles": ["compute"], "hardware": FIGURES,
             "leaf_switch": {"leaf2": "cpu01"}}
        )  # fmt: skip

    spec = variant("slurm-h100", cpu_nodes_with_docker)
    data = json.loads(files_of(spec, "cpu01")[nvidia.DOCKER_DAEMON_JSON])
    assert data == {"exec-opts": ["native.cgroupdriver=systemd"]}


# --------------------------------------------------------------------------- MIG


def _upstream_mig() -> list[dict[str, Any]]:
    return [
        yaml.safe_load((UPSTREAM / "mig-parted" / name).read_text())
        for name in ("config-default.yaml", "examples-config.yaml")
    ]


def _filters(entry: dict[str, Any]) -> list[str]:
    f = entry.get("device-filter", [])
    return [f] if isinstance(f, str) else list(f)


def _check_mig_schema(doc: dict[str, Any], upstream: dict[str, Any]) -> None:
    """The structure of mig-parted's config files, as the upstream files use it."""
    allowed = {key for entries in upstream["mig-configs"].values() for e in entries for key in e}
    assert set(doc) == set(upstream) == {"version", "mig-configs"}
    assert doc["version"] == upstream["version"] == "v1"
    assert isinstance(doc["mig-configs"], dict) and doc["mig-configs"]
    for name, entries in doc["mig-configs"].items():
        assert isinstance(name, str)
        assert isinstance(entries, list) and entries
        for e in entries:
            assert set(e) <= allowed, f"{name}: keys {set(e) - allowed} are not used by mig-parted"
            assert {"devices", "mig-enabled"} <= set(e)
            assert e["devices"] == "all" or (
                isinstance(e["devices"], list) and all(isinstance(i, int) for i in e["devices"])
            )
            assert isinstance(e["mig-enabled"], bool)
            if "mig-devices" in e:
                assert all(isinstance(p, str) and isinstance(n, int) for p, n in e["mig-devices"].items())
            assert all(re.fullmatch(r"0x[0-9A-F]{4}10DE", f) for f in _filters(e))


@needs_upstream
def test_upstream_mig_files_pass_the_schema_check() -> None:
    """The structural check itself accepts mig-parted's own files."""
    default, example = _upstream_mig()
    _check_mig_schema(default, default)
    _check_mig_schema(example, default)


@needs_upstream
def test_mig_parted_config_matches_upstream_schema_and_profiles() -> None:
    default, _ = _upstream_mig()
    upstream_entries = [e for entries in default["mig-configs"].values() for e in entries]
    upstream_filters = {f for e in upstream_entries for f in _filters(e)}
    upstream_profiles = {p for e in upstream_entries for p in e.get("mig-devices", {})}
    for inv in ("slurm-h100", "k8s-gpu-operator"):
        spec = inventory(inv)
        for n in resolve_nodes(spec):
            if not n.mig_config:
                continue
            model = n.gpu_model
            assert model is not None
            doc = yaml.safe_load(files_of(spec, n.name)[nvidia.MIG_CONFIG])
            _check_mig_schema(doc, default)
            assert n.mig_config in doc["mig-configs"]
            # Entries that upstream filters to this model's PCI IDs name its valid profiles.
            ids = set(model.mig_device_filter)
            assert ids <= upstream_filters
            model_profiles = {p for e in upstream_entries if ids & set(_filters(e)) for p in e.get("mig-devices", {})}
            assert model_profiles and model_profiles <= {p.name for p in model.mig_profiles}
            for entries in doc["mig-configs"].values():
                for e in entries:
                    assert _filters(e) == model.mig_device_filter
                    for profile in e.get("mig-devices", {}):
                        assert profile in upstream_profiles
                        assert profile in model_profiles, f"{profile} is not upstream's for {model.name}"


def test_mig_configs_only_those_that_fit_the_model() -> None:
    def change(d: dict[str, Any]) -> None:
        d["mig"]["configs"]["a100-only"] = [{"devices": "all", "mig_devices": {"1g.5gb": 7}}]
        d["mig"]["configs"]["off"] = [{"devices": "all", "mig_enabled": False}]

    spec = variant("slurm-h100", change)
    doc = yaml.safe_load(files_of(spec, "gpu061")[nvidia.MIG_CONFIG])
    assert list(doc["mig-configs"]) == ["inference", "off"]
    assert doc["mig-configs"]["off"] == [
        {"device-filter": GPU_MODELS["H100-80GB"].mig_device_filter, "devices": "all", "mig-enabled": False}
    ]
    assert nvidia.mig_configs_for(spec, GPU_MODELS["A100-40GB"]) == ["a100-only", "off"]


def test_mig_layout_written_as_given() -> None:
    spec = inventory("slurm-h100")
    doc = yaml.safe_load(files_of(spec, "gpu061")[nvidia.MIG_CONFIG])
    assert [(e["devices"], e["mig-enabled"], e["mig-devices"]) for e in doc["mig-configs"]["inference"]] == [
        ([0, 1, 2, 3], True, {"1g.10gb": 7}),
        ([4, 5, 6, 7], True, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
    ]


def _systemd_env(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        m = re.fullmatch(r'Environment="([A-Z_]+)=(.*)"', line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


def test_mig_manager_dropin_selects_the_node_config() -> None:
    """mig-parted's deployments/systemd/service.sh reads MIG_PARTED_SELECTED_CONFIG (required)
    and MIG_PARTED_CONFIG_FILE; its override.conf sets all-disabled, so ours sorts after it."""
    spec = inventory("slurm-h100")
    text = files_of(spec, "gpu061")[nvidia.MIG_MANAGER_DROPIN]
    assert "[Service]" in text.splitlines()
    assert _systemd_env(text) == {
        "MIG_PARTED_CONFIG_FILE": nvidia.MIG_CONFIG,
        "MIG_PARTED_SELECTED_CONFIG": "inference",
    }
    dropin = Path(nvidia.MIG_MANAGER_DROPIN)
    assert dropin.parent.name == "nvidia-mig-manager.service.d"
    assert dropin.name > "override.conf"
    assert nvidia.MIG_CONFIG != "/etc/nvidia-mig-manager/config.yaml"  # regenerated by the service


def test_mig_manager_dropin_refreshes_cdi_only_where_the_host_toolkit_writes_it() -> None:
    """After MIG devices change the CDI spec must be regenerated (NVIDIA/mig-parted cdi-refresh.sh):
    the drop-in runs nvidia-ctk after every apply where the host's toolkit generates CDI, nowhere else."""
    refresh = f"ExecStartPost=/usr/bin/nvidia-ctk cdi generate --output={nvidia.CDI_SPEC}"
    on = files_of(inventory("slurm-h100"), "gpu061")[nvidia.MIG_MANAGER_DROPIN]
    assert refresh in on.splitlines()

    def cdi_off(d: dict[str, Any]) -> None:
        d["container_runtime"]["cdi"] = False

    off = files_of(variant("slurm-h100", cdi_off), "gpu061")[nvidia.MIG_MANAGER_DROPIN]
    assert "ExecStartPost" not in off
    assert _systemd_env(off) == _systemd_env(on)


def test_mig_manager_dropin_rejects_bad_names() -> None:
    with pytest.raises(ValueError, match="invalid MIG config name"):
        nvidia.mig_manager_dropin('x"y')


# --------------------------------------------------------------------------- DCGM

CSV_LINE = re.compile(r"^(?P<field>[A-Z0-9_]+)\s*,\s*(?P<type>[a-z]+)\s*,\s*(?P<help>.*\S)\s*$")


def _upstream_csv(name: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(active rows, commented-out rows) of an upstream counters CSV."""
    active: list[tuple[str, str, str]] = []
    commented: list[tuple[str, str, str]] = []
    for line in (UPSTREAM / "dcgm-exporter" / name).read_text().splitlines():
        body = line.lstrip("#").strip()
        m = CSV_LINE.match(body)
        if not m:
            continue
        row = (m.group("field"), m.group("type"), m.group("help"))
        (commented if line.lstrip().startswith("#") else active).append(row)
    return active, commented


def _upstream_rows() -> set[tuple[str, str, str]]:
    rows: set[tuple[str, str, str]] = set()
    for name in ("default-counters.csv", "dcp-metrics-included.csv"):
        active, commented = _upstream_csv(name)
        rows |= set(active) | set(commented)
    return rows


@needs_upstream
def test_default_counters_match_upstream_exactly() -> None:
    active, _ = _upstream_csv("default-counters.csv")
    assert [(c.field, c.type, c.help) for c in dcgm.DCGM_DEFAULT_COUNTERS] == active


@needs_upstream
def test_counter_catalog_is_upstream_and_complete() -> None:
    rows = _upstream_rows()
    for c in dcgm.DCGM_FIELDS.values():
        assert (c.field, c.type, c.help) in rows, c.field
    assert {r[0] for r in rows} == set(dcgm.DCGM_FIELDS)


def _parse_counters_csv(text: str) -> list[tuple[str, str, str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        assert len(parts) == 3, f"not FIELD, type, help: {line!r}"
        assert CSV_LINE.match(line), line
        rows.append((parts[0], parts[1], parts[2]))
    return rows


@needs_upstream
def test_rendered_default_counters_csv() -> None:
    spec = inventory("slurm-h100")
    text = files_of(spec, "gpu001")[nvidia.DCGM_COUNTERS_CSV]
    active, _ = _upstream_csv("default-counters.csv")
    assert _parse_counters_csv(text) == active
    upstream_text = (UPSTREAM / "dcgm-exporter" / "default-counters.csv").read_text()
    # The upstream format explanation heads the file, as in default-counters.csv.
    assert "\n".join(upstream_text.splitlines()[:3]) in text


@needs_upstream
def test_custom_counters_are_upstream_fields() -> None:
    fields = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_UTIL"]
    spec = variant("slurm-h100", lambda d: d["dcgm"].update(counters=fields))
    rows = _parse_counters_csv(files_of(spec, "gpu001")[nvidia.DCGM_COUNTERS_CSV])
    assert [r[0] for r in rows] == fields[:3]
    upstream = _upstream_rows()
    assert all(r in upstream for r in rows)


def test_unknown_counter_is_a_spec_error_before_anything_renders() -> None:
    with pytest.raises(SpecError, match=r"dcgm\.counters.*DCGM_FI_DEV_GPU_UTILS.*did you mean DCGM_FI_DEV_GPU_UTIL\b"):
        variant("slurm-h100", lambda d: d["dcgm"].update(counters=["DCGM_FI_DEV_GPU_UTILS"]))
    with pytest.raises(ValueError, match="unknown DCGM field 'NOPE'"):
        dcgm.dcgm_counter("NOPE")


def test_empty_counter_list_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"dcgm\.counters: is empty; omit it"):
        variant("slurm-h100", lambda d: d["dcgm"].update(counters=[]))


def _exec_start(unit: str) -> list[str]:
    return next(line for line in unit.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1].split()


@pytest.mark.parametrize("hostengine", [True, False])
def test_dcgm_exporter_unit(hostengine: bool) -> None:
    spec = variant("slurm-h100", lambda d: d["dcgm"].update(exporter_port=9500, enabled=hostengine))
    unit = nvidia.dcgm_exporter_unit(spec)
    argv = _exec_start(unit)
    assert argv[:5] == [nvidia.DCGM_EXPORTER_BIN, "-f", nvidia.DCGM_COUNTERS_CSV, "-a", ":9500"]
    assert (argv[5:] == ["-r", "localhost:5555"]) is hostengine
    assert ("Requires=nvidia-dcgm.service" in unit) is hostengine
    assert "[Install]" in unit and "WantedBy=multi-user.target" in unit


# --------------------------------------------------------------------------- enroot


def _enroot_settings(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.split(None, 1)
            out[key] = value
    return out


def test_enroot_conf() -> None:
    conf = _enroot_settings(nvidia.enroot_conf())
    for key in ("ENROOT_RUNTIME_PATH", "ENROOT_CACHE_PATH", "ENROOT_DATA_PATH"):
        assert conf[key].startswith("/")
    assert conf["ENROOT_RUNTIME_PATH"].startswith(nvidia.ENROOT_RUNTIME_DIR + "/")
    tmpfiles = [line.split() for line in nvidia.enroot_tmpfiles().splitlines() if line and line[0] != "#"]
    assert [t[1] for t in tmpfiles] == [nvidia.ENROOT_RUNTIME_DIR, nvidia.ENROOT_CACHE_DIR, nvidia.ENROOT_DATA_DIR]
    assert all(t[0] == "d" and t[2] == "1777" for t in tmpfiles)
    sysctl = dict(
        (k.strip(), v.strip())
        for k, v in (line.split("=") for line in nvidia.userns_sysctl().splitlines() if "=" in line)
    )
    assert int(sysctl["user.max_user_namespaces"]) > 0


# --------------------------------------------------------------------------- which node gets what

ENROOT = {nvidia.ENROOT_CONF, nvidia.ENROOT_TMPFILES, nvidia.USERNS_SYSCTL}
CONTAINERD = {nvidia.CONTAINERD_CONFIG}
CONTAINERD_GPU = {nvidia.CONTAINERD_CONFIG, nvidia.CONTAINERD_NVIDIA_DROPIN}
# Ubuntu GPU nodes with the host driver: nouveau off, nvidia-persistenced kept running.
GPU = {nvidia.NOUVEAU_BLACKLIST, nvidia.PERSISTENCED_DROPIN}
MIG = {nvidia.MIG_CONFIG, nvidia.MIG_MANAGER_DROPIN}
DCGM = {nvidia.DCGM_COUNTERS_CSV, nvidia.DCGM_EXPORTER_UNIT}

EXPECTED: dict[str, dict[str, set[str]]] = {
    "slurm-h100": {
        "ctl01": set(),
        "db01": set(),
        "login01": ENROOT,
        "mon01": set(),
        "gpu001": GPU | DCGM | CONTAINERD_GPU | ENROOT,
        "gpu060": GPU | DCGM | CONTAINERD_GPU | ENROOT,
        "gpu061": GPU | MIG | DCGM | CONTAINERD_GPU | ENROOT,
    },
    # dcgm-exporter comes from the GPU Operator there; control planes run containerd too.
    "k8s-gpu-operator": {
        "kcp1": CONTAINERD,
        "kmon1": CONTAINERD,
        # host DCGM and its dcgm-exporter (the operator's exporter is off: one host engine per GPU)
        "kgpu01": GPU | DCGM | CONTAINERD_GPU,
        "kinf02": GPU | MIG | DCGM | CONTAINERD_GPU,
    },
    # No GPUs, engine none, enroot off.
    "lab": {"node1": set(), "node2": set(), "node3": set()},
}


@pytest.mark.parametrize("inv", sorted(EXPECTED))
def test_which_node_gets_what(inv: str) -> None:
    spec = inventory(inv)
    for name, expected in EXPECTED[inv].items():
        assert set(files_of(spec, name)) == expected, name


def test_operator_managed_toolkit_and_exporter_leave_the_host_alone() -> None:
    def change(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"].update(toolkit="operator", dcgm_exporter=True)
        d["dcgm"] = {"enabled": False, "exporter": False}  # the operator's exporter: its own host engine only

    spec = variant("k8s-gpu-operator", change)
    assert set(files_of(spec, "kgpu01")) == GPU | CONTAINERD
    host = inventory("k8s-gpu-operator")  # host DCGM and exporter
    assert set(files_of(host, "kgpu01")) == GPU | DCGM | CONTAINERD_GPU


def test_enroot_off_and_engine_none() -> None:
    def change(d: dict[str, Any]) -> None:
        d["slurm"]["containers"] = {"enroot": False}
        d["container_runtime"]["engine"] = "none"

    spec = variant("slurm-h100", change)
    assert set(files_of(spec, "gpu001")) == GPU | DCGM
    assert files_of(spec, "login01") == {}


def test_modes_and_owners() -> None:
    spec = inventory("slurm-h100")
    for f in nvidia.nvidia_files(spec, node(spec, "gpu061"), SECRETS):
        assert (f.mode, f.owner, f.group, f.secret) == ("0644", "root", "root", False), f.path


# --------------------------------------------------------------------------- determinism


def _render_all(spec: Spec) -> list[tuple[str, str, bytes]]:
    return [(n.name, f.path, f.data) for n in resolve_nodes(spec) for f in nvidia.nvidia_files(spec, n, SECRETS)]


@pytest.mark.parametrize("inv", sorted(EXPECTED))
def test_deterministic(inv: str) -> None:
    first = _render_all(inventory(inv))
    assert first == _render_all(inventory(inv))
    assert first == _render_all(inventory(inv))


@pytest.mark.parametrize("inv", sorted(EXPECTED))
def test_no_machine_paths_or_unrendered_markers(inv: str) -> None:
    for _, path, data in _render_all(inventory(inv)):
        text = data.decode()
        assert "{{" not in text and "{%" not in text, path
        assert text.endswith("\n"), path


@pytest.mark.parametrize("name", ["yes", "on", "no", "null", "true", "all-1g"])
def test_mig_config_names_survive_yaml(name: str) -> None:
    """Config names that YAML 1.1 would read as booleans, numbers or null stay strings."""

    def change(d: dict[str, Any]) -> None:
        d["mig"]["configs"] = {name: d["mig"]["configs"]["inference"]}
        for group in d["node_groups"]:
            if group.get("mig_config"):
                group["mig_config"] = name

    spec = variant("slurm-h100", change)
    files = files_of(spec, "gpu061")
    assert list(yaml.safe_load(files[nvidia.MIG_CONFIG])["mig-configs"]) == [name]
    assert _systemd_env(files[nvidia.MIG_MANAGER_DROPIN])["MIG_PARTED_SELECTED_CONFIG"] == name
