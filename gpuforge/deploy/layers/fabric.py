"""fabric: the RDMA stack, Soft-RoCE, RoCE QoS, IPoIB, peermem, GDRCopy, NCCL, nccl-tests and OpenMPI.

Runs on every node after the NVIDIA layers (``nvidia_peermem`` needs the driver's modules, NCCL the
CUDA repository they configure) and before Slurm (slurmd restarts on a slurm.conf whose
``MpiDefault=pmix`` needs the PMIx plugin); a node of a group without ``fabric`` gets empty layers.
Four operations, each a :class:`Layer` planned against the host's facts (nothing runs where the host
already matches):

1. fabric-sources: DOCA-OFED's apt source or dnf repository and its key (checked against
   ``fabric.doca_key_fingerprint`` before it is trusted), the NCCL apt pin; a package index refresh
   when they change;
2. fabric: the packages (the distribution's rdma-core, perftest and OpenMPI/UCX/PMIx, or doca-ofed;
   Slurm's PMIx plugin; NCCL pinned, from NVIDIA's CUDA repository), the rendered files
   (``gpuforge.render.fabric``), the Soft-RoCE and RoCE QoS units, systemd-networkd for IPoIB, and the
   kernel modules loaded now when their list changes;
3. fabric-gdrcopy: GDRCopy's release packages (sha256-checked), when the installed version differs;
4. fabric-nccl-tests: nccl-tests built on the node against the pinned NCCL and MPI, when the build's
   inputs (its marker) differ;
5. fabric-sharp-plugin: the NCCL-RDMA-SHARP plugin built from its release (sha256-checked) against CUDA
   and DOCA's SHARP, its library directory in ld.so.conf.d and ``ldconfig``, when its marker differs.
"""

from __future__ import annotations

import shlex

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Layer, LayerFacts, Service, Step, StepKind, refresh_step
from gpuforge.deploy.layers.nvidia.common import (
    STATE_DIR,
    apt_install,
    unavailable_step,
)
from gpuforge.deploy.layers.nvidia.repos import checked_key_command
from gpuforge.deploy.operations.layer import converge
from gpuforge.deploy.package_manager import RPM
from gpuforge.render import fabric as fr
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile
from gpuforge.spec import Spec
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.fabric import Fabric, MpiFlavor, RdmaStack
from gpuforge.spec.fabric_rules import fabric_of, nccl_cuda, pmix_default
from gpuforge.spec.model import Role
from gpuforge.spec.nodes import Node

NCCL_TESTS_MARKER = f"{STATE_DIR}/nccl-tests.built"
SHARP_PLUGIN_MARKER = f"{STATE_DIR}/nccl-rdma-sharp-plugins.built"
#: Roles whose nodes run srun/sbatch or slurmstepd: they load Slurm's MPI plugin (MpiDefault).
SLURM_RUNS = frozenset({Role.COMPUTE, Role.LOGIN, Role.CONTROLLER})
NETWORKD = "systemd-networkd"


def sources_layer(s: Spec, n: Node) -> Layer:
    """DOCA's source and key, the NCCL pin; ``apt-get update`` / ``dnf makecache`` when they change."""
    f = fabric_of(s, n)
    if f is None:
        return Layer.empty("fabric-sources")
    files = [x for x in fr.fabric_files(s, n) if x.path in fr.SOURCE_PATHS]
    doca = fr.doca_repo(s, n.platform, f) if f.stack is RdmaStack.DOCA else None
    keyed = doca is not None and doca.available and doca.bundle is None
    key_path = fr.DOCA_KEYRING if n.os.is_deb else src.rpm_key_path(fr.DOCA_REPO)
    sources = {fr.DOCA_LIST, fr.DOCA_REPO_FILE}
    if not files and doca is None:
        return Layer.empty("fabric-sources")

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if doca is not None and not doca.available:
            steps.append(unavailable_step(f"DOCA-OFED {f.doca_version}", doca.reason))
        if keyed and doca is not None and facts.contents.get(key_path) is None:
            steps.append(doca_key_step(f, doca, key_path))
            changed.add(key_path)
        if changed & (sources | {key_path}):
            why = "DOCA-OFED source changed" if n.os.is_deb else "DOCA-OFED repository changed"
            steps.append(refresh_step(n.os.is_rpm, why))
        return steps

    return Layer(
        "fabric-sources", early_files=files, read_paths=(key_path,) if keyed else (), after=after, rpm=not n.os.is_deb
    )


def doca_key_step(f: Fabric, doca: src.Repo, key_path: str) -> Step:
    """DOCA's key put where apt's ``signed-by`` / dnf's ``gpgkey`` read it, only once it is the pinned key."""
    fingerprint = f.doca_key_fingerprint
    if fingerprint is None:  # the spec rules require it outside offline mode
        return unavailable_step("DOCA-OFED's repository key", "fabric.doca_key_fingerprint is not set")
    cmd = checked_key_command(doca.key_url or "", key_path, fingerprint)
    if not key_path.startswith("/usr/"):
        cmd = f"install -d -m 0755 /etc/pki/rpm-gpg && {cmd}"
    return Step(StepKind.KEYRING, f"DOCA-OFED repository key {fingerprint} from {doca.key_url} ({key_path})", cmd)


def stack_packages(s: Spec, n: Node, f: Fabric) -> list[str]:
    """The node's fabric packages: RDMA stack, perftest, MPI, Slurm's PMIx plugin and NCCL (pinned)."""
    row = table.DISTRO_STACKS[n.os]
    pkgs = list(table.DOCA_PACKAGES) if f.stack is RdmaStack.DOCA else [*row.rdma, row.perftest]
    if f.mpi is MpiFlavor.OPENMPI and f.stack is RdmaStack.DISTRO:
        pkgs += row.mpi  # DOCA brings its own OpenMPI (fabric_packages doca-ofed-meta)
        if f.nccl_tests and fr.gpu_fabric(s, n):
            pkgs += row.mpi_dev
    pkgs += pmix_packages(s, n)
    cuda = nccl_cuda(s, f)
    if fr.gpu_fabric(s, n) and f.nccl is not None and cuda is not None:
        pkgs += table.nccl_packages(n.os.is_deb, f.nccl, cuda)
    return list(dict.fromkeys(pkgs))  # once each (EL's pmix is MPI's and Slurm's)


def pmix_packages(s: Spec, n: Node) -> tuple[str, ...]:
    """Slurm's PMIx plugin and the library it opens, on every node that runs Slurm commands or jobs once
    ``MpiDefault=pmix`` is set (fabric_packages debian12-slurm-pmix-dlopen): fabric or not."""
    if s.slurm is None or not pmix_default(s) or not n.roles & SLURM_RUNS:
        return ()
    if s.slurm.source.schedmd_packaging and n.os.is_deb:
        return ()  # mpi_pmix is in slurm-smd, which conflicts with Debian's; the slurm layer adds libpmix-dev
    return table.DISTRO_STACKS[n.os].slurm_pmix


def pmix_layer(s: Spec, n: Node) -> Layer:
    """A Slurm node outside every fabric group, with ``MpiDefault=pmix``: the PMIx plugin's packages."""
    pkgs = pmix_packages(s, n)
    if not pkgs:
        return Layer.empty("fabric")

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        return [] if n.os.is_deb else rpm_install_steps(list(pkgs), facts)

    return Layer(
        "fabric",
        packages=pkgs if n.os.is_deb else (),
        watch_packages=() if n.os.is_deb else pkgs,
        after=None if n.os.is_deb else after,
        rpm=not n.os.is_deb,
    )


def fabric_layer(s: Spec, n: Node) -> Layer:
    """Packages, the modules file and the enroot hook of the node's fabric; its modules loaded now
    when their list changes. The units (Soft-RoCE, QoS, networkd) are :func:`devices_layer`'s: a
    package installed here restarts none of them."""
    f = fabric_of(s, n)
    if f is None:
        return pmix_layer(s, n)
    files = [x for x in fr.fabric_files(s, n) if x.path not in fr.SOURCE_PATHS | fr.DEVICE_PATHS]
    pkgs = stack_packages(s, n, f)
    nccl = [p for p in pkgs if p.startswith("libnccl")]
    cuda_repo = src.cuda_repo(s, n.platform)
    doca = fr.doca_repo(s, n.platform, f) if f.stack is RdmaStack.DOCA else None
    blocked = set(nccl) if not cuda_repo.available else set()
    blocked |= set(table.DOCA_PACKAGES) if doca is not None and not doca.available else set()
    wanted = [p for p in pkgs if p not in blocked]
    modules = fr.fabric_modules(s, n, f)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        steps: list[Step] = []
        if nccl and not cuda_repo.available:
            steps.append(unavailable_step(f"NCCL {f.nccl}", cuda_repo.reason))
        if not n.os.is_deb:
            steps += rpm_install_steps(wanted, facts)
        if fr.MODULES_FILE in changed:
            steps.append(modules_step(modules))
        return steps

    return Layer(
        "fabric",
        packages=tuple(wanted) if n.os.is_deb else (),
        watch_packages=() if n.os.is_deb else tuple(src_name(p) for p in wanted),
        files=files,
        after=after,
        hold_pins=True,
        rpm=not n.os.is_deb,
    )


def devices_layer(s: Spec, n: Node) -> Layer:
    """The Soft-RoCE and RoCE QoS scripts and units, the IPoIB network file, and their services."""
    f = fabric_of(s, n)
    files = [x for x in fr.fabric_files(s, n) if x.path in fr.DEVICE_PATHS]
    if f is None or not files:
        return Layer.empty("fabric-devices")
    return Layer("fabric-devices", files=files, services=fabric_services(f, n.os.is_deb))


def src_name(pkg: str) -> str:
    return pkg.split("=", 1)[0]


def rpm_install_steps(wanted: list[str], facts: LayerFacts) -> list[Step]:
    """dnf installs what an EL node lacks or has at another pin (``name=version`` -> ``name-version``)."""
    todo = [
        p
        for p in wanted
        if facts.packages.get(src_name(p)) is None
        or ("=" in p and not src.version_matches(facts.packages.get(src_name(p)), p.split("=", 1)[1]))
    ]
    if not todo:
        return []
    names = [RPM.pin(p) for p in todo]
    return [Step(StepKind.INSTALL, f"install {', '.join(names)}", RPM.install(todo))]


def modules_step(modules: list[str]) -> Step:
    """Load the fabric's modules now (systemd-modules-load loads them at boot). ``nvidia_peermem`` only
    where the NVIDIA driver is loaded (a node without its GPU, or before the reboot a new driver
    needs, gets it at the next boot)."""
    plain = [m for m in modules if m not in (table.PEERMEM_MODULE, table.GDRCOPY_MODULE)]
    cmd = f"modprobe -a {' '.join(plain)}"
    if table.PEERMEM_MODULE in modules:
        cmd += f" && {{ [ ! -d /sys/module/nvidia ] || modprobe {table.PEERMEM_MODULE}; }}"
    return Step(StepKind.MODULES, f"load kernel modules {', '.join(modules)}", cmd)


def fabric_services(f: Fabric, deb: bool = True) -> tuple[Service, ...]:
    """Soft-RoCE and RoCE QoS units (re-run when their script or unit changes); IPoIB's network service
    (systemd-networkd on Debian and Ubuntu, NetworkManager on EL 9) reloads its file."""
    out = []
    if f.soft_roce:
        unit = f"{fr.UNIT_DIR}/{fr.SOFT_ROCE_UNIT}"
        out.append(Service(fr.SOFT_ROCE_UNIT, restart_on=(unit, fr.SOFT_ROCE_SCRIPT)))
    if f.roce is not None:
        unit = f"{fr.UNIT_DIR}/{fr.ROCE_QOS_UNIT}"
        out.append(Service(fr.ROCE_QOS_UNIT, restart_on=(unit, fr.ROCE_QOS_SCRIPT)))
    if f.ipoib is not None and deb:
        out.append(Service(NETWORKD, reload_on=(fr.IPOIB_NETWORK,), reload_command="networkctl reload"))
    elif f.ipoib is not None:
        up = f"nmcli connection reload && nmcli connection up {fr.IPOIB_CONNECTION}"
        out.append(Service("NetworkManager", reload_on=(fr.IPOIB_NM_PROFILE,), reload_command=up))
    return tuple(out)


# --------------------------------------------------------------------------- GDRCopy and nccl-tests


def gdrcopy_layer(s: Spec, n: Node) -> Layer:
    """GDRCopy's kernel module, library and tools from NVIDIA's redist files (sha256-checked), and
    ``gdrdrv`` loaded once they are in (the fabric layer loads the other modules before)."""
    f = fabric_of(s, n)
    if f is None or not f.gdrcopy or not fr.gpu_fabric(s, n):
        return Layer.empty("fabric-gdrcopy")
    arts = fr.gdrcopy_artifacts(s, n, f)
    names = list(table.GDRCOPY_PACKAGES)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        missing = [a for a in arts if not a.available]
        if not arts or missing:
            why = "; ".join(a.reason or a.name for a in missing) or f"no GDRCopy packages for {n.os.value}"
            return [unavailable_step(f"GDRCopy {f.gdrcopy_version}", why)]
        if all(src.version_matches(facts.packages.get(p), f.gdrcopy_version) for p in names):
            return []
        fetch = " && ".join(src.fetch_command(a) for a in arts)
        install = apt_install([a.node_path for a in arts], downgrades=True)
        what = f"GDRCopy {f.gdrcopy_version} (CUDA {nccl_cuda(s, f)}), then load {table.GDRCOPY_MODULE}"
        return [Step(StepKind.INSTALL, what, f"{fetch} && {install} && modprobe {table.GDRCOPY_MODULE}")]

    return Layer("fabric-gdrcopy", watch_packages=tuple(names), after=after)


def nccl_tests_marker(s: Spec, f: Fabric) -> str:
    """What the build was made from: nccl-tests release, NCCL build, CUDA toolkit."""
    return f"{f.nccl_tests_version} {f.nccl}+cuda{nccl_cuda(s, f)} cuda-{s.versions.cuda_toolkit}\n"


def nccl_tests_command(s: Spec, n: Node, f: Fabric, art: src.Artifact) -> str:
    """Unpack the release into /opt/nccl-tests/<version>, ``make MPI=1`` there (nccl-tests-build),
    link /opt/nccl-tests/current to it, then record the marker."""
    row = table.DISTRO_STACKS[n.os]
    if f.stack is RdmaStack.DOCA:
        mpi_home = f"$(ls -d {table.DOCA_MPI_GLOB} | sort -V | tail -n 1)"
    else:
        mpi_home = row.mpi_home.replace("{triplet}", n.platform.names.gnu_triplet)
    dest = f"{table.NCCL_TESTS_DIR}/{f.nccl_tests_version}"
    cuda_home = table.cuda_home(s.versions.cuda_toolkit or "")
    make = f'make -C {dest} -j"$(nproc)" MPI=1 MPI_HOME="{mpi_home}" CUDA_HOME={cuda_home} NCCL_HOME=/usr'
    steps = f"{make} && test -x {dest}/build/{table.NCCL_TESTS_BINARY} && ln -sfn {dest} {table.NCCL_TESTS_DIR}/current"
    return source_build(art, dest, dest, steps, nccl_tests_marker(s, f), NCCL_TESTS_MARKER)


def source_build(art: src.Artifact, wipe: str, into: str, steps: str, marker: str, marker_path: str) -> str:
    """A release archive built on the node: fetched (sha256-checked), ``wipe`` removed, unpacked into
    ``into``, ``steps`` run; the marker is written only after every step succeeded."""
    return (
        f"{src.fetch_command(art)} && rm -rf {wipe} && install -d -m 0755 {into} && "
        f"tar -xzf {shlex.quote(art.node_path)} -C {into} --strip-components=1 && {steps} && "
        f"install -d -m 0755 {STATE_DIR} && echo {shlex.quote(marker.strip())} > {marker_path}"
    )


def nccl_tests_layer(s: Spec, n: Node) -> Layer:
    """nccl-tests built on a GPU node when its marker (release, NCCL, CUDA) is not the spec's."""
    f = fabric_of(s, n)
    if f is None or not fr.nccl_tests_wanted(s, n, f):
        return Layer.empty("fabric-nccl-tests")
    art = fr.nccl_tests_artifact(s, f)
    want = nccl_tests_marker(s, f)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if facts.contents.get(NCCL_TESTS_MARKER) == want:
            return []
        if not art.available:
            return [unavailable_step(f"nccl-tests {f.nccl_tests_version}", art.reason)]
        what = f"build nccl-tests {f.nccl_tests_version} (MPI=1) against NCCL {f.nccl}"
        return [Step(StepKind.BUILD, what, nccl_tests_command(s, n, f, art))]

    return Layer("fabric-nccl-tests", read_paths=(NCCL_TESTS_MARKER,), after=after)


def sharp_plugin_marker(s: Spec, f: Fabric) -> str:
    """What the plugin was built from: its release, the CUDA toolkit, the DOCA release (SHARP's)."""
    return f"{f.sharp_plugin} cuda-{s.versions.cuda_toolkit} doca-{f.doca_version}\n"


def sharp_plugin_command(s: Spec, f: Fabric, art: src.Artifact) -> str:
    """Unpack the release into <prefix>/src, autogen/configure/make install there (sharp-plugin-build;
    ``--with-sharp`` given, so a node without SHARP fails instead of building RDMA only), check that
    libnccl-net.so is in <prefix>/lib, refresh ldconfig's cache, then record the marker."""
    prefix = fr.sharp_plugin_prefix(f.sharp_plugin or "")
    build = f"{prefix}/src"
    cuda_home = table.cuda_home(s.versions.cuda_toolkit or "")
    configure = f"./configure --prefix={prefix} --with-cuda={cuda_home} --with-sharp={table.SHARP_DIR}"
    steps = (
        f'( cd {build} && ./autogen.sh && {configure} && make -j"$(nproc)" && make install ) && '
        f"test -e {prefix}/lib/{table.SHARP_PLUGIN_LIBRARY} && ldconfig"
    )
    return source_build(art, prefix, build, steps, sharp_plugin_marker(s, f), SHARP_PLUGIN_MARKER)


def sharp_plugin_layer(s: Spec, n: Node) -> Layer:
    """The NCCL-RDMA-SHARP plugin on a GPU node: its build tools, the ld.so.conf.d file and the build
    when the marker (release, CUDA, DOCA) is not the spec's; ``ldconfig`` alone when only the file changed."""
    f = fabric_of(s, n)
    if f is None or f.sharp_plugin is None or not fr.sharp_plugin_wanted(s, n, f):
        return Layer.empty("fabric-sharp-plugin")
    art = fr.sharp_plugin_artifact(s, f.sharp_plugin)
    want = sharp_plugin_marker(s, f)
    ldconf = RenderedFile(fr.SHARP_LDCONF, fr.sharp_plugin_ldconf(f.sharp_plugin))
    if not art.available:  # neither build tools nor a library path for a build that cannot run
        missing = unavailable_step(f"NCCL-RDMA-SHARP plugin {f.sharp_plugin}", art.reason)
        return Layer("fabric-sharp-plugin", after=lambda facts, changed: [missing])

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if facts.contents.get(SHARP_PLUGIN_MARKER) == want:
            return [Step(StepKind.RELOAD, "ldconfig (NCCL net plugin directory)", "ldconfig")] if changed else []
        what = f"build the NCCL-RDMA-SHARP plugin {f.sharp_plugin} (CUDA {s.versions.cuda_toolkit}, SHARP)"
        return [Step(StepKind.BUILD, what, sharp_plugin_command(s, f, art))]

    return Layer(
        "fabric-sharp-plugin",
        packages=table.SHARP_PLUGIN_BUILD_DEPS,
        files=[ldconf],
        read_paths=(SHARP_PLUGIN_MARKER,),
        after=after,
    )


@deploy("gpuforge fabric")
def fabric() -> None:
    s, n = spec(), node()
    converge(name="fabric: DOCA-OFED source and NCCL pin", layer=sources_layer(s, n))
    converge(name="fabric: RDMA stack, MPI, NCCL and kernel modules", layer=fabric_layer(s, n))
    converge(name="fabric: Soft-RoCE devices, RoCE QoS, IPoIB", layer=devices_layer(s, n))
    converge(name="fabric: GDRCopy", layer=gdrcopy_layer(s, n))
    converge(name="fabric: nccl-tests", layer=nccl_tests_layer(s, n))
    converge(name="fabric: NCCL-RDMA-SHARP plugin", layer=sharp_plugin_layer(s, n))
