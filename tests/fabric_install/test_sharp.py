"""The NCCL-RDMA-SHARP plugin: spec in, rules and exact build steps and files out."""

from __future__ import annotations

from typing import Any

from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.image_mode import OPERATION_TAGS, ImageTag
from gpuforge.deploy.layers import fabric as layer
from gpuforge.deploy.layers.nvidia.common import STATE_DIR
from gpuforge.render import fabric as fr
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import fabric_packages as table
from tests.fabric.conftest import FINGERPRINT, data, group, node_of, problems, spec_of

ARCHIVE = "nccl-rdma-sharp-plugins-2.1.0.tar.gz"
URL = "https://github.com/Mellanox/nccl-rdma-sharp-plugins/archive/refs/tags/v2.1.0.tar.gz"
MARKER = f"{STATE_DIR}/nccl-rdma-sharp-plugins.built"


def sharp_data(**fabric: Any) -> dict[str, Any]:
    """The fabric tests' spec, its GPU group on DOCA-OFED 3.2.1 with the plugin 2.1.0 pinned."""
    d = data()
    pins = {"stack": "doca", "doca_version": "3.2.1", "doca_key_fingerprint": FINGERPRINT, "sharp_plugin": "2.1.0"}
    group(d, "gpu")["fabric"].update({**pins, **fabric})
    return d


def test_the_release_archive_is_the_tag_of_the_pinned_version() -> None:
    assert table.sharp_plugin_file("2.1.0") == (ARCHIVE, URL)
    assert {"sharp-plugin-build", "sharp-plugin-channels", "nccl-net-plugin", "ldconfig"} <= set(table.SOURCES)
    assert all(c in table.SOURCES for c in table.SHARP_PLUGIN_CITES)


def test_the_plugin_needs_infiniband_doca_ubuntu_nccl_and_the_cuda_toolkit() -> None:
    spec_of(sharp_data())
    field = "node_groups[1].fabric.sharp_plugin: "
    d = sharp_data()
    group(d, "gpu")["fabric"].update(stack="distro")
    del group(d, "gpu")["fabric"]["doca_version"]
    assert f"{field}no distribution package ships the NCCL-RDMA-SHARP plugin or SHARP" in problems(d)
    d = sharp_data(type="roce")
    assert f"{field}SHARP aggregates in InfiniBand (Quantum) switches: set type: infiniband" in problems(d)
    d = sharp_data()
    del group(d, "gpu")["fabric"]["nccl"]
    del d["versions"]["cuda_toolkit"]
    out = problems(d)
    assert f"{field}the plugin is loaded by NCCL: set fabric.nccl" in out
    assert f"{field}the plugin compiles against CUDA: set versions.cuda_toolkit" in out
    d = sharp_data()
    d["cluster"]["os"] = "rocky9"
    assert f"{field}the plugin's build dependencies are cited for Ubuntu only, not rocky9" in problems(d)
    d = sharp_data(sharp_plugin="v2.1")
    assert f"{field}a version such as 1.31.4 (got 'v2.1')" in problems(d)


def test_a_group_without_gpus_ignores_the_plugin() -> None:
    d = data()
    group(d, "cpu")["fabric"]["sharp_plugin"] = "2.1.0"  # RoCE, distro stack: ignored, as nccl is
    spec = spec_of(d)
    assert layer.sharp_plugin_layer(spec, node_of(spec, "cpu1")).is_empty
    assert layer.sharp_plugin_layer(spec, node_of(spec, "ctl1")).is_empty


def test_the_plugin_is_built_from_the_checked_archive_once_and_found_through_ldconfig() -> None:
    d = sharp_data()
    spec = spec_of(d)
    node = node_of(spec, "gpu1")
    steps, _ = plan_layer(layer.sharp_plugin_layer(spec, node), LayerFacts())
    assert [str(s.kind) for s in steps] == ["unavailable"] and "no sha256 is known" in steps[0].summary
    d["sources"] = {"artifact_sha256": {ARCHIVE: "ef" * 32}}
    spec = spec_of(d)
    node = node_of(spec, "gpu1")
    lay = layer.sharp_plugin_layer(spec, node)
    assert lay.packages == ("autoconf", "automake", "libtool", "make", "gcc", "libibverbs-dev")
    assert [(f.path, f.content) for f in lay.files] == [
        (
            "/etc/ld.so.conf.d/gpuforge-nccl-net.conf",
            "# Managed by gpuforge: edit the cluster spec, not this file.\n/opt/nccl-rdma-sharp-plugins/2.1.0/lib\n",
        )
    ]
    steps, _ = plan_layer(lay, LayerFacts())
    assert [str(s.kind) for s in steps] == ["install", "upload", "build"]
    assert steps[1].upload is not None and steps[1].upload.path == fr.SHARP_LDCONF
    art = src.artifact(spec, ARCHIVE, URL)
    prefix = "/opt/nccl-rdma-sharp-plugins/2.1.0"
    assert all(p in (steps[0].command or "") for p in lay.packages)
    assert [(str(s.kind), s.command) for s in steps[2:]] == [
        (
            "build",
            f"{src.fetch_command(art)} && rm -rf {prefix} && install -d -m 0755 {prefix}/src && "
            f"tar -xzf {art.node_path} -C {prefix}/src --strip-components=1 && "
            f"( cd {prefix}/src && ./autogen.sh && ./configure --prefix={prefix} --with-cuda=/usr/local/cuda-12.9 "
            '--with-sharp=/opt/mellanox/sharp && make -j"$(nproc)" && make install ) && '
            f"test -e {prefix}/lib/libnccl-net.so && ldconfig && install -d -m 0755 {STATE_DIR} && "
            f"echo '2.1.0 cuda-12.9 doca-3.2.1' > {MARKER}",
        )
    ]
    assert "sha256sum -c" in src.fetch_command(art) and URL in src.fetch_command(art)
    ldconf = {f.path: {"type": "file", "sha256": f.sha256, "mode": f.mode, "owner": f.owner, "group": f.group}
              for f in lay.files}  # fmt: skip
    packages = dict.fromkeys(lay.packages, "1.0-1")
    built = LayerFacts(packages=packages, files=ldconf, contents={MARKER: "2.1.0 cuda-12.9 doca-3.2.1\n"})
    assert plan_layer(lay, built)[0] == []
    moved = LayerFacts(packages=packages, contents={MARKER: "2.1.0 cuda-12.9 doca-3.2.1\n"})
    steps, _ = plan_layer(lay, moved)
    assert [(str(s.kind), s.command) for s in steps[1:]] == [("reload", "ldconfig")]
    assert steps[0].upload is not None and steps[0].upload.path == fr.SHARP_LDCONF
    rebuilt = LayerFacts(packages=packages, files=ldconf, contents={MARKER: "2.1.0 cuda-12.4 doca-3.2.1\n"})
    assert [str(s.kind) for s in plan_layer(lay, rebuilt)[0]] == ["build"]


def test_the_plugin_operation_is_tagged_for_images() -> None:
    assert OPERATION_TAGS["fabric-sharp-plugin"] is ImageTag.SHARED_HOOKS
    assert fr.SHARP_LDCONF.startswith("/etc/ld.so.conf.d/")
