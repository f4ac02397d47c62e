"""The fabric deploy layers planned against host facts given as data: exact steps and commands
out, nothing where the host already matches."""

from __future__ import annotations

from typing import Any

from gpuforge.deploy.apt import APT_UPDATE, install_command
from gpuforge.deploy.converge import Layer, LayerFacts, Step, plan_layer
from gpuforge.deploy.layers import fabric as layer
from gpuforge.deploy.layers.nvidia.repos import checked_key_command
from gpuforge.render import fabric as fr
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node
from tests.fabric.conftest import FINGERPRINT, data, group, node_of, spec_of

GPU_PACKAGES = [
    "rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "rdmacm-utils", "iproute2", "perftest",
    "openmpi-bin", "ucx-utils", "slurm-wlm-basic-plugins", "libpmix-dev",
    "libnccl2=2.27.7-1+cuda12.9", "libnccl-dev=2.27.7-1+cuda12.9",
]  # fmt: skip


def converged(lay: Layer, packages: dict[str, str] | None = None) -> LayerFacts:
    """Facts of a host that has everything ``lay`` wants (packages at their pins, files as rendered)."""
    pkgs = {p.split("=", 1)[0]: (p.split("=", 1)[1] if "=" in p else "1.0-1") for p in lay.packages}
    files: dict[str, dict[str, Any] | None] = {
        f.path: {"type": "file", "sha256": f.sha256, "mode": f.mode, "owner": f.owner, "group": f.group}
        for f in lay.all_files
    }
    units: dict[str, dict[str, Any] | None] = {
        s.unit: {"ActiveState": "active", "UnitFileState": "enabled"} for s in lay.services
    }
    return LayerFacts(packages={**pkgs, **(packages or {})}, files=files, units=units)


def kinds(steps: list[Step]) -> list[tuple[str, str | None]]:
    return [(str(s.kind), s.upload.path if s.upload else s.command) for s in steps]


def target(d: dict[str, Any], name: str) -> tuple[Spec, Node]:
    spec = spec_of(d)
    return spec, node_of(spec, name)


def test_a_fresh_gpu_node_gets_the_stack_nccl_files_and_modules() -> None:
    spec, node = target(data(), "gpu1")
    lay = layer.fabric_layer(spec, node)
    steps, _ = plan_layer(lay, LayerFacts())
    assert kinds(steps) == [
        ("install", install_command(GPU_PACKAGES)),
        ("upload", fr.MODULES_FILE),
        ("upload", fr.ENROOT_HOOK),
        ("modules", "modprobe -a ib_uverbs rdma_ucm && { [ ! -d /sys/module/nvidia ] || modprobe nvidia_peermem; }"),
    ]
    assert plan_layer(lay, converged(lay))[0] == []


def test_a_new_nccl_pin_moves_the_installed_build() -> None:
    spec, node = target(data(), "gpu1")
    lay = layer.fabric_layer(spec, node)
    old = {"libnccl2": "2.26.2-1+cuda12.8", "libnccl-dev": "2.26.2-1+cuda12.8"}
    steps, _ = plan_layer(lay, converged(lay, old))
    pins = ["libnccl2=2.27.7-1+cuda12.9", "libnccl-dev=2.27.7-1+cuda12.9"]
    assert kinds(steps) == [("upgrade", install_command(pins, downgrades=True))]


def test_a_changed_module_list_is_loaded_now() -> None:
    spec, node = target(data(), "gpu1")
    before = layer.fabric_layer(spec, node)
    d = data()
    group(d, "gpu")["fabric"].update(peermem=False, ipoib={"interface": "ib0", "address_start": "10.20.0.11/16"})
    spec2, node2 = target(d, "gpu1")
    steps, _ = plan_layer(layer.fabric_layer(spec2, node2), converged(before))
    assert kinds(steps) == [("upload", fr.MODULES_FILE), ("modules", "modprobe -a ib_uverbs rdma_ucm ib_ipoib")]


def test_device_units_restart_when_their_script_or_unit_changes() -> None:
    spec, node = target(data(), "cpu1")
    lay = layer.devices_layer(spec, node)
    assert [s.unit for s in lay.services] == [fr.SOFT_ROCE_UNIT]
    fresh, _ = plan_layer(lay, LayerFacts())
    assert [str(s.kind) for s in fresh] == ["pending", "upload", "upload", "daemon-reload", "enable", "restart"]
    assert fresh[-1].command is not None and fresh[-1].command.startswith(f"systemctl restart {fr.SOFT_ROCE_UNIT}")
    assert plan_layer(lay, converged(lay))[0] == []
    d = data()
    group(d, "cpu")["fabric"]["soft_roce"] = ["eth1", "eth2"]
    spec2, node2 = target(d, "cpu1")
    steps, _ = plan_layer(layer.devices_layer(spec2, node2), converged(lay))
    assert [str(s.kind) for s in steps] == ["pending", "upload", "upload", "daemon-reload", "restart"]


def test_a_changed_qos_setting_reruns_the_qos_unit_only() -> None:
    d = data()
    group(d, "cpu")["fabric"].update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT,
                                     roce={"pfc": [3]})  # fmt: skip
    spec, node = target(d, "cpu1")
    lay = layer.devices_layer(spec, node)
    group(d, "cpu")["fabric"]["roce"] = {"pfc": [3], "trust": "pcp"}
    spec2, node2 = target(d, "cpu1")
    steps, _ = plan_layer(layer.devices_layer(spec2, node2), converged(lay))
    assert kinds(steps)[1:] == [
        ("upload", fr.ROCE_QOS_SCRIPT),
        ("restart", f"systemctl restart {fr.ROCE_QOS_UNIT} && rm -f /var/lib/gpuforge/pending/{fr.ROCE_QOS_UNIT}."
                    f"restart /var/lib/gpuforge/pending/{fr.ROCE_QOS_UNIT}.reload "
                    f"/var/lib/gpuforge/pending/{fr.ROCE_QOS_UNIT}.reconfigure"),
    ]  # fmt: skip


def test_ipoib_network_changes_reload_networkd() -> None:
    d = data()
    group(d, "gpu")["fabric"]["ipoib"] = {"interface": "ib0", "address_start": "10.20.0.11/16"}
    spec, node = target(d, "gpu1")
    lay = layer.devices_layer(spec, node)
    group(d, "gpu")["fabric"]["ipoib"]["address_start"] = "10.21.0.11/16"
    spec2, node2 = target(d, "gpu1")
    steps, _ = plan_layer(layer.devices_layer(spec2, node2), converged(lay))
    # (a changed file under /etc/systemd/ always brings a daemon-reload: converge.daemon_reload_steps)
    assert [str(s.kind) for s in steps] == ["pending", "upload", "daemon-reload", "reload"]
    assert (steps[-1].command or "").startswith("networkctl reload && rm -f ")


def test_ipoib_on_el9_is_a_networkmanager_profile() -> None:
    d = data()
    d["cluster"]["os"] = "rocky9"
    group(d, "gpu")["fabric"]["ipoib"] = {"interface": "ib0", "address_start": "10.20.0.11/16"}
    spec, node = target(d, "gpu2")
    lay = layer.devices_layer(spec, node)
    (profile,) = lay.files
    assert (profile.path, profile.mode) == (fr.IPOIB_NM_PROFILE, "0600")
    text = profile.data.decode()
    assert "[connection]\nid=gpuforge-ipoib\ntype=infiniband\ninterface-name=ib0\n" in text
    assert "[ipv4]\nmethod=manual\naddress1=10.20.0.12/16\n" in text
    group(d, "gpu")["fabric"]["ipoib"]["interface"] = "ib1"
    spec2, node2 = target(d, "gpu2")
    steps, _ = plan_layer(layer.devices_layer(spec2, node2), converged(lay))
    assert [str(s.kind) for s in steps] == ["pending", "upload", "reload"]  # not under /etc/systemd: no daemon-reload
    assert (steps[-1].command or "").startswith("nmcli connection reload && nmcli connection up gpuforge-ipoib && ")


def doca_data(**sources: Any) -> dict[str, Any]:
    d = data()
    group(d, "cpu")["fabric"].update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    if sources:
        d["sources"] = sources
    return d


def test_doca_source_its_checked_key_and_an_index_refresh() -> None:
    spec, node = target(doca_data(), "cpu1")
    lay = layer.sources_layer(spec, node)
    steps, _ = plan_layer(lay, LayerFacts())
    url = "https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu24.04/x86_64"
    key = "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"
    assert kinds(steps) == [
        ("upload", fr.DOCA_LIST),
        ("keyring", checked_key_command(key, fr.DOCA_KEYRING, FINGERPRINT)),
        ("apt-update", APT_UPDATE),
    ]
    assert steps[0].upload is not None and f"{url}/ ./" in steps[0].upload.data.decode()
    have = converged(lay)
    have.contents = {fr.DOCA_KEYRING: "key"}
    assert plan_layer(lay, have)[0] == []
    packages = layer.fabric_layer(spec, node).packages
    assert packages[0] == "doca-ofed" and "openmpi-bin" not in packages  # DOCA brings its own OpenMPI


def test_doca_without_a_source_is_reported_and_not_installed() -> None:
    spec, node = target(doca_data(mode="mirror", apt_proxy="http://10.9.0.1:3142"), "cpu1")
    steps, _ = plan_layer(layer.sources_layer(spec, node), LayerFacts())
    assert [str(s.kind) for s in steps] == ["unavailable"]
    assert "sources.mirrors.doca" in steps[0].summary
    assert "doca-ofed" not in layer.fabric_layer(spec, node).packages


def test_rhel_nodes_install_with_dnf() -> None:
    d = data()
    d["cluster"]["os"] = "rocky9"
    spec, node = target(d, "cpu1")
    lay = layer.fabric_layer(spec, node)
    assert lay.packages == () and lay.rpm
    steps, _ = plan_layer(lay, LayerFacts(packages={"rdma-core": "51.0-1.el9"}))
    names = ["libibverbs-utils", "infiniband-diags", "librdmacm-utils", "iproute", "perftest", "openmpi", "ucx", "pmix"]
    assert ("install", f"dnf -y install {' '.join(names)}") in kinds(steps)  # pmix once: MPI's and Slurm's


def gdrcopy_names(spec: Spec, node: Node) -> list[str]:
    fabric = spec.node_groups[1].fabric
    assert fabric is not None
    return [a.name for a in fr.gdrcopy_artifacts(spec, node, fabric)]


def test_gdrcopy_needs_known_sha256_then_installs_and_loads_gdrdrv() -> None:
    d = data()
    group(d, "gpu")["fabric"]["gdrcopy"] = True
    spec, node = target(d, "gpu1")
    steps, _ = plan_layer(layer.gdrcopy_layer(spec, node), LayerFacts())
    assert [str(s.kind) for s in steps] == ["unavailable"] and "no sha256 is known" in steps[0].summary
    names = gdrcopy_names(spec, node)
    assert names == [f"{p}_2.6-1_amd64.Ubuntu24_04.deb" for p in ("gdrdrv-dkms", "libgdrapi", "gdrcopy")]
    d["sources"] = {"artifact_sha256": {n: "ab" * 32 for n in names}}
    spec, node = target(d, "gpu1")
    lay = layer.gdrcopy_layer(spec, node)
    steps, _ = plan_layer(lay, LayerFacts())
    arts = fr.gdrcopy_artifacts(spec, node, spec.node_groups[1].fabric)  # type: ignore[arg-type]
    fetch = " && ".join(src.fetch_command(a) for a in arts)
    install = install_command([a.node_path for a in arts], downgrades=True)
    assert kinds(steps) == [("install", f"{fetch} && {install} && modprobe gdrdrv")]
    assert "sha256sum -c" in fetch
    have = LayerFacts(packages=dict.fromkeys(table.GDRCOPY_PACKAGES, "2.6-1"))
    assert plan_layer(lay, have)[0] == []


def test_nccl_tests_build_against_the_pins_once() -> None:
    d = data()
    group(d, "gpu")["fabric"]["nccl_tests"] = True
    d["sources"] = {"artifact_sha256": {"nccl-tests-2.19.6.tar.gz": "cd" * 32}}
    spec, node = target(d, "gpu1")
    assert "libopenmpi-dev" in layer.fabric_layer(spec, node).packages
    lay = layer.nccl_tests_layer(spec, node)
    steps, _ = plan_layer(lay, LayerFacts())
    assert [str(s.kind) for s in steps] == ["build"]
    cmd = steps[0].command or ""
    assert (
        'make -C /opt/nccl-tests/2.19.6 -j"$(nproc)" MPI=1 MPI_HOME="/usr/lib/x86_64-linux-gnu/openmpi" '
        "CUDA_HOME=/usr/local/cuda-12.9 NCCL_HOME=/usr" in cmd
    )
    assert cmd.endswith(f"echo '2.19.6 2.27.7-1+cuda12.9 cuda-12.9' > {layer.NCCL_TESTS_MARKER}")
    assert "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.19.6.tar.gz" in cmd
    built = LayerFacts(contents={layer.NCCL_TESTS_MARKER: "2.19.6 2.27.7-1+cuda12.9 cuda-12.9\n"})
    assert plan_layer(lay, built)[0] == []


def test_slurm_nodes_outside_the_fabric_get_what_mpidefault_pmix_loads() -> None:
    """srun and slurmstepd load mpi_pmix.so on every node once MpiDefault=pmix; Debian's opens the
    unversioned libpmix.so, which libpmix-dev ships (fabric_packages debian12-slurm-pmix-dlopen)."""
    spec, node = target(data(), "ctl1")
    lay = layer.fabric_layer(spec, node)
    assert lay.packages == ("slurm-wlm-basic-plugins", "libpmix-dev") and not lay.files
    for build in (layer.sources_layer, layer.devices_layer, layer.gdrcopy_layer, layer.nccl_tests_layer):
        assert build(spec, node).is_empty
    d = data()
    for g in ("gpu", "cpu"):
        group(d, g)["fabric"]["mpi"] = "none"
    spec, node = target(d, "ctl1")
    assert layer.fabric_layer(spec, node).is_empty
    assert "libpmix-dev" not in layer.fabric_layer(*target(d, "gpu1")).packages


def test_nodes_without_gpus_get_no_gpu_layers() -> None:
    d = data()
    group(d, "cpu")["fabric"].update(gdrcopy=True, nccl="2.27.7-1", nccl_tests=True)
    spec, node = target(d, "cpu1")
    assert layer.gdrcopy_layer(spec, node).is_empty and layer.nccl_tests_layer(spec, node).is_empty
    assert not any(p.startswith("libnccl") for p in layer.fabric_layer(spec, node).packages)


def test_schedmds_packages_get_libpmix_dev_and_never_debians_conflicting_plugins() -> None:
    """slurm-smd conflicts with Debian's slurm-wlm-basic-plugins (slurm_packages schedmd-debian-control) and
    carries mpi_pmix itself, which opens libpmix-dev's libpmix.so (schedmd-pmix-dlopen): with slurm.source
    site or build, the fabric layer installs no Debian Slurm package and every Slurm node gets libpmix-dev
    with its Slurm packages, MpiDefault=pmix or not."""
    from gpuforge.deploy.layers.slurm import config_layer
    from gpuforge.deploy.runstate import RunState
    from gpuforge.render.files import Secrets

    d = data()
    d["slurm"]["source"] = "site"
    d["versions"]["slurm"] = "24.11.5-1"
    spec = spec_of(d)
    secrets = Secrets.redacted()
    for name in ("ctl1", "gpu1"):
        node = node_of(spec, name)
        fabric_pkgs = layer.fabric_layer(spec, node).packages
        assert not any(p.startswith("slurm-wlm") for p in fabric_pkgs), fabric_pkgs
        slurm_pkgs = config_layer(spec, node, secrets, name, RunState()).packages
        assert "libpmix-dev" in slurm_pkgs and "slurm-smd-client=24.11.5-1" in slurm_pkgs, slurm_pkgs
    for g in ("gpu", "cpu"):
        group(d, g)["fabric"]["mpi"] = "none"
    spec = spec_of(d)
    assert "libpmix-dev" in config_layer(spec, node_of(spec, "ctl1"), secrets, "ctl1", RunState()).packages
    d["slurm"]["source"] = "distro"
    d["versions"]["slurm"] = "distro"
    spec = spec_of(d)
    assert "libpmix-dev" not in config_layer(spec, node_of(spec, "ctl1"), secrets, "ctl1", RunState()).packages
