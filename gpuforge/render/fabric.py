"""The fabric layer's files: kernel modules, Soft-RoCE devices, RoCE QoS, IPoIB, enroot, DOCA sources.

Pure functions of the spec and the node; a node of a group without ``fabric`` gets none.

- ``/etc/modules-load.d/gpuforge-fabric.conf``: ``ib_uverbs``, ``rdma_ucm``; ``rdma_rxe`` with Soft-RoCE,
  ``ib_ipoib`` with IPoIB, ``nvidia_peermem`` on GPU nodes (``peermem``), ``gdrdrv`` with GDRCopy;
- Soft-RoCE: a script making each ``rxe_<netdev>`` once (``rdma link add``) and a oneshot unit running it
  after the network is up, at every boot;
- RoCE QoS (``roce``): a script running ``mlnx_qos`` (trust, PFC) and writing the ECN switches of each
  HCA's interface, and a oneshot unit running it;
- IPoIB (``ipoib``): a systemd-networkd ``.network`` file with the node's address;
- enroot (nodes that run enroot): a pre-start hook that binds ``/dev/infiniband`` into containers;
- DOCA (``stack: doca``): the apt source or dnf repository of the pinned DOCA release, and the NCCL apt pin;
- the NCCL-RDMA-SHARP plugin (``sharp_plugin``): the ld.so.conf.d file naming its library directory, so
  NCCL's ``dlopen("libnccl-net.so")`` finds it through ldconfig's cache (the ``fabric-sharp-plugin`` layer
  writes it with the build).

Escaping: every name is a plain token by its spec type (``gpuforge.spec.fabric``); addresses and
versions are checked by theirs. No value reaches a shell or unit line but through those types.
"""

from __future__ import annotations

from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile, Secrets, header, render_template
from gpuforge.render.nvidia import enroot_wanted, gpu_node, host_driver
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.fabric import Fabric, RdmaStack, soft_roce_device
from gpuforge.spec.fabric_rules import fabric_of, ipoib_address, nccl_cuda
from gpuforge.spec.model import SourceMode, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.platforms import Platform

MODULES_FILE = "/etc/modules-load.d/gpuforge-fabric.conf"
LIBEXEC = "/usr/local/libexec/gpuforge"
SOFT_ROCE_SCRIPT = f"{LIBEXEC}/soft-roce"
SOFT_ROCE_UNIT = "gpuforge-soft-roce.service"
ROCE_QOS_SCRIPT = f"{LIBEXEC}/roce-qos"
ROCE_QOS_UNIT = "gpuforge-roce-qos.service"
UNIT_DIR = "/etc/systemd/system"
IPOIB_NETWORK = "/etc/systemd/network/60-gpuforge-ipoib.network"
IPOIB_CONNECTION = "gpuforge-ipoib"
IPOIB_NM_PROFILE = f"/etc/NetworkManager/system-connections/{IPOIB_CONNECTION}.nmconnection"
ENROOT_HOOK = "/etc/enroot/hooks.d/60-gpuforge-rdma.sh"
DOCA_REPO = "doca"
DOCA_LIST = "/etc/apt/sources.list.d/gpuforge-doca.list"
DOCA_REPO_FILE = "/etc/yum.repos.d/gpuforge-doca.repo"
DOCA_KEYRING = "/usr/share/keyrings/gpuforge-doca.asc"  # armored (.asc): apt reads it as it is
NCCL_PIN = "/etc/apt/preferences.d/gpuforge-nccl"
SHARP_LDCONF = "/etc/ld.so.conf.d/gpuforge-nccl-net.conf"
#: The package sources of the fabric (written before its packages install: the fabric-sources layer).
SOURCE_PATHS = frozenset({DOCA_LIST, DOCA_REPO_FILE, NCCL_PIN})
#: The device units' files (the fabric-devices layer: their services restart when these change).
DEVICE_PATHS = frozenset(
    {
        SOFT_ROCE_SCRIPT,
        f"{UNIT_DIR}/{SOFT_ROCE_UNIT}",
        ROCE_QOS_SCRIPT,
        f"{UNIT_DIR}/{ROCE_QOS_UNIT}",
        IPOIB_NETWORK,
        IPOIB_NM_PROFILE,
    }
)


def gpu_fabric(spec: Spec, node: Node) -> bool:
    """The node has GPUs with a host driver: peermem, GDRCopy, NCCL and nccl-tests apply to it."""
    return gpu_node(spec, node) and host_driver(spec)


def wants_cuda_repo(spec: Spec, node: Node) -> bool:
    """NCCL comes from NVIDIA's CUDA repository: the node's NVIDIA layer configures it."""
    fabric = fabric_of(spec, node)
    return fabric is not None and fabric.nccl is not None and gpu_fabric(spec, node)


def nccl_tests_wanted(spec: Spec, node: Node, fabric: Fabric) -> bool:
    """The node builds nccl-tests: a GPU node whose fabric asks for them and pins NCCL."""
    return fabric.nccl_tests and fabric.nccl is not None and gpu_fabric(spec, node)


def sharp_plugin_wanted(spec: Spec, node: Node, fabric: Fabric) -> bool:
    """The node builds the NCCL-RDMA-SHARP plugin: a GPU node whose fabric pins it and NCCL."""
    return fabric.sharp_plugin is not None and fabric.nccl is not None and gpu_fabric(spec, node)


def nccl_tests_artifact(spec: Spec, fabric: Fabric) -> src.Artifact:
    """The nccl-tests source archive of the pinned release (the fabric-nccl-tests layer builds it)."""
    return src.artifact(spec, *table.nccl_tests_file(fabric.nccl_tests_version))


def sharp_plugin_artifact(spec: Spec, version: str) -> src.Artifact:
    """The NCCL-RDMA-SHARP plugin's source archive of release ``version`` (the fabric-sharp-plugin layer builds it)."""
    return src.artifact(spec, *table.sharp_plugin_file(version))


def release_files(spec: Spec, node: Node, fabric: Fabric) -> list[src.Artifact]:
    """Every release file the node's fabric layers fetch: GDRCopy's packages, the nccl-tests and SHARP
    plugin archives where they are built there."""
    arts = gdrcopy_artifacts(spec, node, fabric)
    if nccl_tests_wanted(spec, node, fabric):
        arts.append(nccl_tests_artifact(spec, fabric))
    if fabric.sharp_plugin is not None and sharp_plugin_wanted(spec, node, fabric):
        arts.append(sharp_plugin_artifact(spec, fabric.sharp_plugin))
    return arts


def sharp_plugin_prefix(version: str) -> str:
    """``--prefix`` of the plugin's build: one directory per release (its library in ``lib/``)."""
    return f"{table.SHARP_PLUGIN_DIR}/{version}"


def sharp_plugin_ldconf(version: str) -> str:
    """The library directory of the pinned release, for ldconfig (fabric_packages ``ldconfig``)."""
    return f"{header()}{sharp_plugin_prefix(version)}/lib\n"


def fabric_modules(spec: Spec, node: Node, fabric: Fabric) -> list[str]:
    """The kernel modules the node loads (fabric_packages ``MODULE_CITES``), in load order."""
    mods = list(table.BASE_MODULES)
    if fabric.soft_roce:
        mods.append(table.SOFT_ROCE_MODULE)
    if fabric.ipoib is not None:
        mods.append(table.IPOIB_MODULE)
    if gpu_fabric(spec, node) and fabric.peermem:
        mods.append(table.PEERMEM_MODULE)
    if gdrcopy_available(spec, node, fabric):
        mods.append(table.GDRCOPY_MODULE)
    return mods


def gdrcopy_artifacts(spec: Spec, node: Node, fabric: Fabric) -> list[src.Artifact]:
    """GDRCopy's release packages for the node (none: not wanted, or not cited for its platform)."""
    cuda = nccl_cuda(spec, fabric)
    if not (fabric.gdrcopy and gpu_fabric(spec, node)) or cuda is None:
        return []
    listed = table.gdrcopy_files(node.platform, fabric.gdrcopy_version, cuda) or []
    return [src.artifact(spec, name, url) for name, url in listed]


def gdrcopy_available(spec: Spec, node: Node, fabric: Fabric) -> bool:
    """GDRCopy installs on the node (each file has a source and a known sha256): only then does the
    node load ``gdrdrv`` at boot (a module that is not there would fail systemd-modules-load)."""
    arts = gdrcopy_artifacts(spec, node, fabric)
    return bool(arts) and all(a.available for a in arts)


def modules_conf(spec: Spec, node: Node, fabric: Fabric) -> str:
    return render_template(
        "fabric/modules-load.conf.j2", header=header().rstrip("\n"), modules=fabric_modules(spec, node, fabric)
    )


def soft_roce_devices(fabric: Fabric) -> list[tuple[str, str]]:
    """(device, network interface) of each Soft-RoCE device."""
    return [(soft_roce_device(n), n) for n in fabric.soft_roce]


def soft_roce_script(fabric: Fabric) -> str:
    return render_template("fabric/soft-roce.sh.j2", header=header().rstrip("\n"), devices=soft_roce_devices(fabric))


def soft_roce_unit(fabric: Fabric) -> str:
    return render_template(
        "fabric/soft-roce.service.j2",
        header=header().rstrip("\n"),
        devices=soft_roce_devices(fabric),
        script=SOFT_ROCE_SCRIPT,
    )


def pfc_bits(priorities: list[int]) -> str:
    """mlnx_qos' ``--pfc`` argument: one 0/1 per priority 0-7 (``[3]`` -> ``0,0,0,1,0,0,0,0``)."""
    return ",".join("1" if p in priorities else "0" for p in range(8))


def roce_qos_script(fabric: Fabric) -> str:
    qos = fabric.roce
    if qos is None:
        raise ValueError("the fabric has no roce settings")
    hcas = "all" if fabric.hcas == "all" else " ".join(fabric.hcas)
    return render_template(
        "fabric/roce-qos.sh.j2",
        header=header().rstrip("\n"),
        hcas=hcas,
        trust=qos.trust.value,
        pfc=qos.pfc,
        pfc_bits=pfc_bits(qos.pfc),
        ecn=qos.ecn,
    )


def roce_qos_unit() -> str:
    return render_template("fabric/roce-qos.service.j2", header=header().rstrip("\n"), script=ROCE_QOS_SCRIPT)


def ipoib_network(spec: Spec, node: Node, fabric: Fabric) -> str:
    """systemd-networkd's file (Debian, Ubuntu) or NetworkManager's keyfile (EL 9: rhel9-networkmanager)."""
    address = ipoib_address(spec, node)
    if fabric.ipoib is None or address is None:
        raise ValueError("the fabric has no ipoib settings")
    name = "fabric/ipoib.network.j2" if node.os.is_deb else "fabric/ipoib.nmconnection.j2"
    return render_template(
        name, header=header().rstrip("\n"), interface=fabric.ipoib.interface, address=address,
        connection=IPOIB_CONNECTION,
    )  # fmt: skip


def ipoib_file(spec: Spec, node: Node, fabric: Fabric) -> RenderedFile:
    if node.os.is_deb:
        return RenderedFile(IPOIB_NETWORK, ipoib_network(spec, node, fabric))
    return RenderedFile(IPOIB_NM_PROFILE, ipoib_network(spec, node, fabric), mode="0600")


def enroot_hook() -> str:
    return render_template("fabric/enroot-rdma.sh.j2", header=header().rstrip("\n"))


# --------------------------------------------------------------------------- DOCA and NCCL sources


def doca_repo(spec: Spec, platform: Platform, fabric: Fabric) -> src.Repo:
    """DOCA's repository for the node: upstream (doca-repo), the site mirror (``sources.mirrors.doca``,
    ``{distro}``/``{arch}`` filled in) or the offline bundle's ``apt/doca`` / ``rpm/doca``."""
    version = fabric.doca_version or ""
    path = table.doca_repo_path(platform, version)
    if path is None:
        return src.Repo(DOCA_REPO, reason=f"no DOCA-OFED repository is known for {platform.os.value}")
    mode = spec.sources.mode
    if mode is SourceMode.OFFLINE:
        return src.bundle_repo(spec, DOCA_REPO, platform.os)
    if mode is SourceMode.MIRROR:
        mirror = spec.sources.mirrors.doca
        if not mirror:
            return src.Repo(DOCA_REPO, reason="mirror mode without sources.mirrors.doca: no source for DOCA-OFED")
        distro = table.DOCA_DISTRO[platform.os] or ""
        url = mirror.replace("{distro}", distro).replace("{arch}", table.DOCA_ARCH[platform.arch]).rstrip("/")
        return src.Repo(DOCA_REPO, url=url, key_url=f"{url}/{table.DOCA_KEY_FILE}")
    return src.Repo(DOCA_REPO, url=f"{table.DOCA_UPSTREAM}/{path}", key_url=table.DOCA_KEY_URL)


def doca_source(repo: src.Repo, deb: bool) -> str:
    """The apt source line (flat repository, ``./``: doca-repo) or the dnf repository file."""
    if repo.url is None:
        raise ValueError(f"{repo.kind}: {repo.reason}")
    if deb:
        if repo.bundle is not None:  # signed by the bundle's key, as the NVIDIA repositories' bundles
            return f"{header()}deb [signed-by={src.BUNDLE_KEYRING}] file:{repo.url} ./\n"
        return f"{header()}deb [signed-by={DOCA_KEYRING}] {repo.url}/ ./\n"
    return header() + src.dnf_repo_file(repo, "gpuforge-doca", "NVIDIA DOCA-OFED (gpuforge)")


def nccl_pin(fabric: Fabric, cuda: str) -> str:
    """Holds libnccl2/libnccl-dev at the pinned build (no unattended upgrade moves them)."""
    version = f"{fabric.nccl}+cuda{cuda}"
    return src.apt_pin("libnccl2 libnccl-dev", version, f"NCCL {version} (spec fabric.nccl, fabric.nccl_cuda)")


# --------------------------------------------------------------------------- the node's files


def fabric_files(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[RenderedFile]:
    """Every fabric file the node gets (none without a fabric)."""
    del secrets  # the fabric has none
    fabric = fabric_of(spec, node)
    if fabric is None:
        return []
    files = [RenderedFile(MODULES_FILE, modules_conf(spec, node, fabric))]
    if fabric.soft_roce:
        files.append(RenderedFile(SOFT_ROCE_SCRIPT, soft_roce_script(fabric), mode="0755"))
        files.append(RenderedFile(f"{UNIT_DIR}/{SOFT_ROCE_UNIT}", soft_roce_unit(fabric)))
    if fabric.roce is not None:
        files.append(RenderedFile(ROCE_QOS_SCRIPT, roce_qos_script(fabric), mode="0755"))
        files.append(RenderedFile(f"{UNIT_DIR}/{ROCE_QOS_UNIT}", roce_qos_unit()))
    if fabric.ipoib is not None:
        files.append(ipoib_file(spec, node, fabric))
    if enroot_wanted(spec, node):
        files.append(RenderedFile(ENROOT_HOOK, enroot_hook(), mode="0755"))
    files += source_files(spec, node, fabric)
    return files


def source_files(spec: Spec, node: Node, fabric: Fabric) -> list[RenderedFile]:
    """DOCA's apt source / dnf repository (when it has a source) and the NCCL pin (deb GPU nodes)."""
    files = []
    if fabric.stack is RdmaStack.DOCA:
        repo = doca_repo(spec, node.platform, fabric)
        if repo.available:
            path = DOCA_LIST if node.os.is_deb else DOCA_REPO_FILE
            files.append(RenderedFile(path, doca_source(repo, node.os.is_deb)))
    cuda = nccl_cuda(spec, fabric)
    if node.os.is_deb and gpu_fabric(spec, node) and fabric.nccl is not None and cuda is not None:
        files.append(RenderedFile(NCCL_PIN, nccl_pin(fabric, cuda)))
    return files
