"""The GPU Operator next to host parts (issue 32 items 6 and 7), run through a real shell.

* ``driver: operator`` with ``toolkit: host``: the host toolkit's ``root`` is the operator's driver
  mount, set by editing the line as NVIDIA's getting-started page does (``nvidia-ctk config`` would
  write it commented out: nvidia_packages ``ctk-comment-defaults``);
* ``helm upgrade --install`` of the operator passes ``--disable-openapi-validation`` (upgrade.rst).
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.render import kubernetes as k8s
from gpuforge.render.nvidia import TOOLKIT_CONFIG, toolkit_driver_root, toolkit_root_command, toolkit_root_is
from gpuforge.spec import nvidia_packages, parse_spec, resolve_nodes
from gpuforge.spec.model import Spec
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
ROOT = "/run/nvidia/driver"
#: The toolkit's default config as v1.20.0 writes it (NVIDIA/nvidia-container-toolkit internal/config/toml_test.go).
DEFAULT = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]
"""


def run_root_command(path: Path) -> subprocess.CompletedProcess[str]:
    command = toolkit_root_command(ROOT).replace(TOOLKIT_CONFIG, str(path))
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "config",
    [
        DEFAULT,
        DEFAULT.replace('#root = "/run/nvidia/driver"', 'root = "/"'),  # another root
        DEFAULT.replace('#root = "/run/nvidia/driver"\n', ""),  # no root line at all
    ],
    ids=["commented-default", "other-root", "no-root-line"],
)
def test_root_command_sets_root_in_the_cli_table(config: str, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(config)
    assert not toolkit_root_is(config, ROOT)
    result = run_root_command(path)
    assert result.returncode == 0, result.stderr
    after = path.read_text()
    data = tomllib.loads(after)
    assert data["nvidia-container-cli"]["root"] == ROOT
    assert toolkit_root_is(after, ROOT)
    before = tomllib.loads(config)  # nothing else changed
    data["nvidia-container-cli"].pop("root")
    before["nvidia-container-cli"].pop("root", None)
    assert data == before
    assert run_root_command(path).returncode == 0 and path.read_text() == after  # a re-run changes nothing


def test_root_command_fails_without_the_cli_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("disable-require = false\n")
    assert run_root_command(path).returncode != 0


def spec_with(change: dict[str, Any] | None = None, name: str = "k8s-gpu-operator") -> Spec:
    data = yaml.safe_load((REPO / f"inventories/{name}.yaml").read_text())
    data = json.loads(json.dumps(data))
    for key, value in (change or {}).items():
        data["kubernetes"]["gpu_operator"][key] = value
    return parse_spec(yaml_text.dump(data))


def test_driver_root_only_where_the_operator_brings_the_driver() -> None:
    operator = spec_with({"driver": "operator"})
    gpu = next(n for n in resolve_nodes(operator) if n.name == "kgpu01")
    cp = next(n for n in resolve_nodes(operator) if n.name == "kcp1")
    assert toolkit_driver_root(operator, gpu) == ROOT == nvidia_packages.OPERATOR_DRIVER_ROOT
    assert toolkit_driver_root(operator, cp) is None  # no GPUs, no host toolkit
    host = spec_with()
    assert toolkit_driver_root(host, next(n for n in resolve_nodes(host) if n.name == "kgpu01")) is None
    both = spec_with({"driver": "operator", "toolkit": "operator"})
    assert toolkit_driver_root(both, next(n for n in resolve_nodes(both) if n.name == "kgpu01")) is None
    slurm = parse_spec((REPO / "inventories/slurm-h100.yaml").read_text())
    assert toolkit_driver_root(slurm, next(n for n in resolve_nodes(slurm) if n.name == "gpu001")) is None


def test_helm_upgrade_disables_openapi_validation(tmp_path: Path) -> None:
    """The argv reaches helm as the upgrade page writes it: a stub helm records its arguments."""
    argv = k8s.helm_gpu_operator_argv(spec_with())
    assert "--disable-openapi-validation" in argv and argv.index("--disable-openapi-validation") < argv.index("-f")
    assert "upgrade.rst" in nvidia_packages.SOURCES["gpu-operator-upgrade"].title
    stub = tmp_path / "helm"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\n')
    stub.chmod(0o755)
    subprocess.run([str(stub), *argv[1:]], check=True, timeout=30)
    assert (tmp_path / "args").read_text().splitlines() == argv[1:]
