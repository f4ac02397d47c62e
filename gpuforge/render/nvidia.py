"""NVIDIA host stack configuration: small pure functions, spec in, text out.

Covers the nouveau blacklist, the container engine's NVIDIA runtime (containerd or
docker), mig-parted's config and the nvidia-mig-manager selection, dcgm-exporter's
counters and unit, and enroot. ``nvidia_files`` decides which node gets which file.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from collections.abc import Iterable
from typing import Any

import yaml

from gpuforge.render.escape import systemd_exec, systemd_word
from gpuforge.render.files import RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.spec.dcgm import DCGM_DEFAULT_COUNTERS, DcgmCounter, dcgm_counter
from gpuforge.spec.gpus import GpuModel
from gpuforge.spec.k8s_model import operator_dcgm_exporter
from gpuforge.spec.model import K8S_ROLES, ContainerEngine, ManagedBy, MigDevices, OsFamily, Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.nvidia_packages import OPERATOR_DRIVER_ROOT

PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpuforge.conf"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROPIN_DIR = "/etc/containerd/conf.d"
CONTAINERD_NVIDIA_DROPIN = f"{CONTAINERD_DROPIN_DIR}/99-nvidia.toml"
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
NVIDIA_RUNTIME_BIN = "/usr/bin/nvidia-container-runtime"

# mig-parted's systemd service regenerates /etc/nvidia-mig-manager/config.yaml from the
# hardware on every boot (older packages made it a symlink to config-default.yaml), and
# reads MIG_PARTED_CONFIG_FILE for a custom file: ours lives beside it.
MIG_CONFIG = "/etc/nvidia-mig-manager/gpuforge.yaml"
# systemd applies drop-ins in name order; the package ships override.conf selecting
# all-disabled, so ours must sort after it.
MIG_MANAGER_DROPIN = "/etc/systemd/system/nvidia-mig-manager.service.d/zz-gpuforge.conf"
#: The CDI spec the host's container toolkit writes (``nvidia-ctk cdi generate``).
CDI_SPEC = "/etc/cdi/nvidia.yaml"
#: The host toolkit's own config (nvidia-container-runtime and its hook read it on every container).
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
#: Kubernetes GPU nodes: an unprivileged container gets only the GPUs the device plugin hands it as
#: volume mounts, never those its ``NVIDIA_VISIBLE_DEVICES`` asks for (k8s_upstream.SOURCES
#: "gpu-operator-unprivileged", "ctk-config").
UNPRIVILEGED_GPU_SETTINGS: dict[str, bool] = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
    "accept-nvidia-visible-devices-as-volume-mounts": True,
}
#: The toolkit's values for those keys when the file does not set them (its default file has them
#: commented out; k8s_upstream.SOURCES "ctk-config").
TOOLKIT_CONFIG_DEFAULTS: dict[str, bool] = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
    "accept-nvidia-visible-devices-as-volume-mounts": False,
}

DCGM_COUNTERS_CSV = "/etc/dcgm-exporter/gpuforge-counters.csv"
DCGM_EXPORTER_UNIT = "/etc/systemd/system/dcgm-exporter.service"
DCGM_EXPORTER_BIN = "/usr/bin/dcgm-exporter"
DCGM_HOSTENGINE = "localhost:5555"

ENROOT_CONF = "/etc/enroot/enroot.conf"
ENROOT_TMPFILES = "/etc/tmpfiles.d/gpuforge-enroot.conf"
USERNS_SYSCTL = "/etc/sysctl.d/90-gpuforge-userns.conf"
ENROOT_RUNTIME_DIR = "/run/enroot"
ENROOT_CACHE_DIR = "/var/lib/enroot/cache"
ENROOT_DATA_DIR = "/var/lib/enroot/data"
MAX_USER_NAMESPACES = 65536

CONTAINER_ROLES = frozenset({Role.COMPUTE, Role.K8S_WORKER, Role.K8S_CONTROL_PLANE})
ENROOT_ROLES = frozenset({Role.COMPUTE, Role.LOGIN})


def _header() -> str:
    return header().rstrip("\n")


# --------------------------------------------------------------------------- yaml output


class FlowList(list[Any]):
    """A list written in flow style (``[0, 1]``) by :func:`dump_yaml`."""


class LiteralStr(str):
    """A string written as a YAML literal block (``|``) by :func:`dump_yaml`."""


class _Dumper(yaml.SafeDumper):
    """Safe dumper that indents block sequences under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        """Never ``&id001`` anchors: an object used twice is written twice, so the text depends on the
        values alone (what :func:`dump_yaml` reuses it by)."""
        return True


def _flow_list(dumper: yaml.SafeDumper, data: FlowList) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


def _literal_str(dumper: yaml.SafeDumper, data: LiteralStr) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style="|")


_Dumper.add_representer(FlowList, _flow_list)
_Dumper.add_representer(LiteralStr, _literal_str)


def dump_yaml(data: Any) -> str:
    """Deterministic YAML: keys in insertion order, block style, 2-space indent.

    Pure, so the text of a document already written is reused (keyed by its values, their types and
    their order): a plan renders the same Prometheus rules on every monitoring node, and PyYAML's
    emitter is slow (a 260-spec policy test spent a sixth of its time in it)."""
    try:
        key = _frozen(data)
        text = _DUMPED.get(key)
    except TypeError:  # a value that cannot be a key: written each time
        return _emit(data)
    if text is None:
        text = _emit(data)
        if len(_DUMPED) >= _DUMPED_MAX:
            _DUMPED.clear()
        _DUMPED[key] = text
    return text


def _emit(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False, width=1000)


_DUMPED: dict[Any, str] = {}
_DUMPED_MAX = 128


def _frozen(value: Any) -> Any:
    """A hashable key of ``value`` that tells apart what dumps differently: the container's class
    (FlowList, LiteralStr), key order, and scalar types (``True`` from ``1``)."""
    if isinstance(value, dict):
        return (type(value), tuple((_frozen(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(_frozen(v) for v in value))
    if isinstance(value, set):
        return (type(value), frozenset(_frozen(v) for v in value))
    return (type(value), value)


def dump_yaml_all(docs: Iterable[Any]) -> str:
    """Several YAML documents separated by ``---``."""
    return "---\n".join(dump_yaml(d) for d in docs)


# --------------------------------------------------------------------------- who runs what


def host_toolkit(spec: Spec) -> bool:
    """The host carries the NVIDIA container runtime (not the GPU Operator's toolkit container)."""
    return spec.kubernetes is None or spec.kubernetes.gpu_operator.toolkit is ManagedBy.HOST


def gpu_node(spec: Spec, node: Node) -> bool:
    """The node has GPUs and the spec pins a driver for them."""
    return node.hardware.gpu is not None and spec.versions.driver is not None


def enroot_wanted(spec: Spec, node: Node) -> bool:
    return spec.slurm is not None and spec.slurm.containers.enroot and bool(node.roles & ENROOT_ROLES)


def toolkit_wanted(spec: Spec, node: Node) -> bool:
    """GPU nodes that run containers (engine or enroot) get the host's container toolkit."""
    engine = spec.container_runtime.engine is not ContainerEngine.NONE and bool(node.roles & CONTAINER_ROLES)
    return gpu_node(spec, node) and host_toolkit(spec) and (engine or enroot_wanted(spec, node))


def engine_wanted(spec: Spec, node: Node) -> bool:
    """The node runs the spec's container engine (containerd or docker) on the host."""
    return spec.container_runtime.engine is not ContainerEngine.NONE and bool(node.roles & CONTAINER_ROLES)


def k8s_host_toolkit(spec: Spec, node: Node) -> bool:
    """A Kubernetes node that carries the host's container toolkit (a GPU node of a Kubernetes role)."""
    return spec.kubernetes is not None and bool(node.roles & K8S_ROLES) and toolkit_wanted(spec, node)


def restrict_unprivileged_gpus(spec: Spec, node: Node) -> bool:
    """The host toolkit's config ignores ``NVIDIA_VISIBLE_DEVICES`` from unprivileged containers and
    takes the device plugin's volume mounts instead (:data:`UNPRIVILEGED_GPU_SETTINGS`).

    On Kubernetes nodes only: nvidia is the default runtime there (:func:`nvidia_default_runtime`),
    so with the toolkit's defaults any pod setting ``NVIDIA_VISIBLE_DEVICES=all`` (CUDA base images
    do) would see every GPU without a request, past the device plugin and the batch queue's
    quotas. The GPU Operator's device plugin passes ``DEVICE_LIST_STRATEGY=volume-mounts`` to match
    (``gpuforge.render.kubernetes.gpu_operator_values``). Slurm nodes keep the toolkit's defaults.
    """
    return k8s_host_toolkit(spec, node)


def toolkit_driver_root(spec: Spec, node: Node) -> str | None:
    """The host toolkit's ``nvidia-container-cli`` ``root`` on a node where the GPU Operator brings the
    driver and the host the toolkit: the path the driver container mounts the driver at (GPU Operator
    getting-started, "Pre-Installed NVIDIA Container Toolkit (but no drivers)";
    ``nvidia_packages.SOURCES['gpu-operator-host-toolkit']``). None elsewhere: the driver is the host's.
    """
    k = spec.kubernetes
    if k is None or k.gpu_operator.driver is not ManagedBy.OPERATOR or not toolkit_wanted(spec, node):
        return None
    return OPERATOR_DRIVER_ROOT


def toolkit_root_is(current: str | None, root: str) -> bool:
    """The toolkit config (``current``: the file as read, None when missing) sets ``root`` in
    ``[nvidia-container-cli]`` (a commented-out line sets nothing, as the toolkit reads it)."""
    try:
        data = tomllib.loads(current or "")
    except tomllib.TOMLDecodeError:
        return False
    cli = data.get("nvidia-container-cli")
    return isinstance(cli, dict) and cli.get("root") == root


def toolkit_root_command(root: str) -> str:
    """Set ``root`` in the toolkit config's ``[nvidia-container-cli]`` table by editing its line, as NVIDIA's
    docs do (``sed -i 's/^#root/root/'``): ``nvidia-ctk config`` writes this value commented out, as it does
    every key set to its commented default (``nvidia_packages.SOURCES['ctk-comment-defaults']``). The line
    is uncommented or replaced in that table, added under its header when absent, then checked."""
    line = f'root = "{root}"'
    in_table = r"/^\[nvidia-container-cli\]$/,/^\[/"
    replace = f"{in_table} s|^#?[[:space:]]*root[[:space:]]*=.*$|{line}|"
    add = r"/^\[nvidia-container-cli\]$/a " + line
    f, want = TOOLKIT_CONFIG, shlex.quote(line)
    return (
        f"sed -i -E {shlex.quote(replace)} {f} && {{ grep -qx {want} {f} || sed -i {shlex.quote(add)} {f}; }} && "
        f"grep -qx {want} {f}"
    )


def nvidia_default_runtime(spec: Spec, node: Node) -> bool:
    """nvidia is the node's default container runtime: where the spec asks for it
    (``container_runtime.nvidia_default``), and always on a Kubernetes node that carries the host's
    toolkit.

    GPU Operator docs (getting-started, "Pre-Installed NVIDIA GPU Drivers and NVIDIA Container
    Toolkit", installed with ``toolkit.enabled=false``): "Before installing the Operator, ensure that
    the default runtime is set to nvidia". The operator's own pods name the ``nvidia`` RuntimeClass
    it creates, but a workload pod that does not (the validator's CUDA sample, users' jobs) runs
    with containerd's default runtime, and under runc the device plugin's ``NVIDIA_VISIBLE_DEVICES``
    gives it no GPU (``cdi.enabled`` is off with the host toolkit, see
    ``gpuforge.render.kubernetes.operator_cdi``). Slurm nodes keep the spec's choice.
    """
    return spec.container_runtime.nvidia_default or k8s_host_toolkit(spec, node)


def cdi_on_host(spec: Spec, node: Node) -> bool:
    """The host's toolkit writes this node's CDI spec (the MIG manager refreshes it after a layout change)."""
    return spec.container_runtime.cdi and toolkit_wanted(spec, node)


def host_dcgm_exporter(spec: Spec) -> bool:
    """dcgm-exporter runs as a host service (DCGM installed, exporter on, not the operator's)."""
    if not (spec.dcgm.enabled and spec.dcgm.exporter):
        return False
    return spec.kubernetes is None or not operator_dcgm_exporter(spec.kubernetes.gpu_operator, spec.dcgm.enabled)


# --------------------------------------------------------------------------- driver


def nouveau_blacklist() -> str:
    """/etc/modprobe.d/blacklist-nouveau.conf."""
    return render_template("nvidia/blacklist-nouveau.conf.j2", header=_header())


# --------------------------------------------------------------------------- container engines


def containerd_config() -> str:
    """/etc/containerd/config.toml: config version 2, drop-in imports, runc with SystemdCgroup."""
    return render_template("nvidia/containerd-config.toml.j2", header=_header(), dropin_dir=CONTAINERD_DROPIN_DIR)


@per_spec
def containerd_nvidia_dropin(spec: Spec, default: bool | None = None) -> str:
    """/etc/containerd/conf.d/99-nvidia.toml: the nvidia runtime as nvidia-ctk writes it (config v2),
    the default runtime when ``default`` (None: as ``container_runtime.nvidia_default`` says; per
    node: :func:`nvidia_default_runtime`)."""
    return render_template(
        "nvidia/containerd-nvidia.toml.j2",
        header=_header(),
        nvidia_default=spec.container_runtime.nvidia_default if default is None else default,
        runtime_bin=NVIDIA_RUNTIME_BIN,
    )


def docker_daemon_json(spec: Spec, nvidia: bool) -> str:
    """/etc/docker/daemon.json (JSON has no comments, so no managed-file header)."""
    data: dict[str, Any] = {"exec-opts": ["native.cgroupdriver=systemd"]}
    if nvidia:
        data["runtimes"] = {"nvidia": {"args": [], "path": NVIDIA_RUNTIME_BIN}}
        if spec.container_runtime.nvidia_default:
            data["default-runtime"] = "nvidia"
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


# --------------------------------------------------------------------------- MIG


def _mig_entry(entry: MigDevices, model: GpuModel) -> dict[str, Any]:
    out: dict[str, Any] = {
        "device-filter": FlowList(model.mig_device_filter),
        "devices": "all" if entry.devices == "all" else FlowList(entry.devices),
        "mig-enabled": entry.mig_enabled,
    }
    if entry.mig_enabled:
        out["mig-devices"] = dict(entry.mig_devices)
    return out


def mig_configs_for(spec: Spec, model: GpuModel) -> list[str]:
    """Names of the spec's MIG layouts that fit ``model`` (every profile is one of its own)."""
    return [
        name
        for name, entries in spec.mig.configs.items()
        if model.supports_mig and all(model.profile(p) is not None for e in entries for p in e.mig_devices)
    ]


@per_spec
def mig_parted_config(spec: Spec, model: GpuModel) -> str:
    """mig-parted config (``version: v1``) with every spec layout that fits ``model``.

    Each entry carries the model's ``device-filter`` so that mig-parted refuses to apply a
    layout to a GPU it was not written for.
    """
    configs = {name: [_mig_entry(e, model) for e in spec.mig.configs[name]] for name in mig_configs_for(spec, model)}
    return header() + dump_yaml({"version": "v1", "mig-configs": configs})


def mig_manager_dropin(selected: str, cdi: bool = False) -> str:
    """nvidia-mig-manager.service drop-in selecting the node's layout from our config file;
    with ``cdi`` the CDI spec is regenerated after every apply (the MIG devices changed)."""
    if not selected or any(c in selected for c in '"\\\n'):
        raise ValueError(f"invalid MIG config name {selected!r}")
    return render_template(
        "nvidia/nvidia-mig-manager.conf.j2",
        header=_header(),
        config_env=systemd_word(f"MIG_PARTED_CONFIG_FILE={MIG_CONFIG}", quoted=True),
        selected_env=systemd_word(f"MIG_PARTED_SELECTED_CONFIG={selected}", quoted=True),
        cdi_generate=systemd_exec(["/usr/bin/nvidia-ctk", "cdi", "generate", f"--output={CDI_SPEC}"]) if cdi else None,
    )


# --------------------------------------------------------------------------- DCGM


def dcgm_counters(spec: Spec) -> list[DcgmCounter]:
    """The counters to export: the spec's list (checked, duplicates dropped) or the upstream defaults."""
    if spec.dcgm.counters is None:
        return list(DCGM_DEFAULT_COUNTERS)
    out: list[DcgmCounter] = []
    for field in spec.dcgm.counters:
        counter = dcgm_counter(field)  # the spec refused unknown fields already
        if counter not in out:
            out.append(counter)
    if not out:
        raise ValueError("dcgm.counters is empty; omit it for dcgm-exporter's default counters")
    return out


@per_spec
def dcgm_counters_csv(spec: Spec) -> str:
    """/etc/dcgm-exporter/gpuforge-counters.csv in dcgm-exporter's format."""
    return render_template("nvidia/dcgm-counters.csv.j2", header=_header(), counters=dcgm_counters(spec))


def dcgm_exporter_argv(spec: Spec) -> list[str]:
    """dcgm-exporter's command line; it uses the node's nv-hostengine when DCGM runs there."""
    argv = [DCGM_EXPORTER_BIN, "-f", DCGM_COUNTERS_CSV, "-a", f":{spec.dcgm.exporter_port}"]
    if spec.dcgm.enabled:
        argv += ["-r", DCGM_HOSTENGINE]
    return argv


def dcgm_exporter_unit(spec: Spec) -> str:
    """/etc/systemd/system/dcgm-exporter.service."""
    return render_template(
        "nvidia/dcgm-exporter.service.j2",
        header=_header(),
        hostengine=spec.dcgm.enabled,
        exec_start=systemd_exec(dcgm_exporter_argv(spec)),
    )


# --------------------------------------------------------------------------- enroot


def enroot_conf() -> str:
    """/etc/enroot/enroot.conf."""
    return render_template(
        "nvidia/enroot.conf.j2",
        header=_header(),
        runtime_path=f"{ENROOT_RUNTIME_DIR}/user-$(id -u)",
        cache_path=f"{ENROOT_CACHE_DIR}/group-$(id -g)",
        data_path=f"{ENROOT_DATA_DIR}/user-$(id -u)",
    )


def enroot_tmpfiles() -> str:
    """/etc/tmpfiles.d/gpuforge-enroot.conf: the shared, sticky parents of enroot's directories."""
    return render_template(
        "nvidia/enroot-tmpfiles.conf.j2", header=_header(), dirs=[ENROOT_RUNTIME_DIR, ENROOT_CACHE_DIR, ENROOT_DATA_DIR]
    )


def userns_sysctl() -> str:
    """/etc/sysctl.d/90-gpuforge-userns.conf."""
    return render_template("nvidia/userns-sysctl.conf.j2", header=_header(), max_namespaces=MAX_USER_NAMESPACES)


# --------------------------------------------------------------------------- per node


def _container_files(spec: Spec, node: Node) -> list[RenderedFile]:
    if not node.roles & CONTAINER_ROLES:
        return []
    nvidia = node.hardware.gpu is not None and host_toolkit(spec)
    engine = spec.container_runtime.engine
    if engine is ContainerEngine.CONTAINERD:
        files = [RenderedFile(CONTAINERD_CONFIG, containerd_config())]
        if nvidia:
            dropin = containerd_nvidia_dropin(spec, nvidia_default_runtime(spec, node))
            files.append(RenderedFile(CONTAINERD_NVIDIA_DROPIN, dropin))
        return files
    if engine is ContainerEngine.DOCKER:
        return [RenderedFile(DOCKER_DAEMON_JSON, docker_daemon_json(spec, nvidia))]
    return []


def persistenced_dropin(os_family: OsFamily) -> str | None:
    """Keep nvidia-persistenced running with persistence mode on, where the package does not.

    Debian's unit is ``StopWhenUnneeded`` (udev starts it when a GPU appears and systemd
    stops it again once nothing wants it); Ubuntu's runs ``--no-persistence-mode``.
    NVIDIA's rpm unit already does both.
    """
    dist = os_family.distribution
    if not dist.persistenced_stops_when_unneeded:
        return None
    text = "# Managed by gpuforge: edit the cluster spec, not this file.\n[Unit]\nStopWhenUnneeded=false\n"
    if dist.persistenced_without_persistence_mode:
        text += (
            "\n[Service]\nExecStart=\n"
            "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose\n"
        )
    return text


def host_driver(spec: Spec) -> bool:
    """gpuforge installs the driver on the host (not the GPU Operator's driver container)."""
    return spec.kubernetes is None or spec.kubernetes.gpu_operator.driver is ManagedBy.HOST


def nvidia_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """Every NVIDIA-stack file a node needs, by its hardware and roles.

    GPU nodes: nouveau blacklist; mig-parted config and selection when the group has a
    ``mig_config``; dcgm-exporter counters and unit when it runs on the host. Nodes that run
    containers (compute, k8s-worker, k8s-control-plane): the engine's config, with the
    nvidia runtime on GPU nodes unless the GPU Operator brings its toolkit. Slurm compute and
    login nodes: enroot when ``slurm.containers.enroot``.
    """
    del secrets  # no secrets in this layer
    files: list[RenderedFile] = []
    model = node.gpu_model
    if model is not None:
        files.append(RenderedFile(NOUVEAU_BLACKLIST, nouveau_blacklist()))
        if node.mig_config:
            if node.mig_config not in mig_configs_for(spec, model):
                raise ValueError(f"MIG config {node.mig_config!r} of {node.name} does not fit its {model.name} GPUs")
            files.append(RenderedFile(MIG_CONFIG, mig_parted_config(spec, model)))
            files.append(RenderedFile(MIG_MANAGER_DROPIN, mig_manager_dropin(node.mig_config, cdi_on_host(spec, node))))
        dropin = persistenced_dropin(node.os) if spec.versions.driver and host_driver(spec) else None
        if dropin is not None:
            files.append(RenderedFile(PERSISTENCED_DROPIN, dropin))
        if host_dcgm_exporter(spec):
            files.append(RenderedFile(DCGM_COUNTERS_CSV, dcgm_counters_csv(spec)))
            files.append(RenderedFile(DCGM_EXPORTER_UNIT, dcgm_exporter_unit(spec)))
    files.extend(_container_files(spec, node))
    if spec.slurm is not None and spec.slurm.containers.enroot and node.roles & ENROOT_ROLES:
        files.append(RenderedFile(ENROOT_CONF, enroot_conf()))
        files.append(RenderedFile(ENROOT_TMPFILES, enroot_tmpfiles()))
        files.append(RenderedFile(USERNS_SYSCTL, userns_sysctl()))
    return files
