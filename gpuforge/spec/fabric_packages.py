"""Upstream facts of the GPU fabric, per platform: one cited data table.

Distribution packages (rdma-core and its tools, perftest, OpenMPI with UCX and PMIx, Slurm's PMIx
plugin), kernel modules, NVIDIA's DOCA-OFED host repository, NCCL's and GDRCopy's packages and
nccl-tests' build. Every row names its sources (``SOURCES``: page or file, and what it says). The
``fabric`` render and deploy layer, the spec rules and the docs read these functions only.

What could be checked on a Debian 12 machine was checked there (``apt-get download`` + ``dpkg -c`` /
``dpkg -f``: the ``debian12-*`` citations); Ubuntu's rows are Debian's source packages as Ubuntu
builds them; RHEL's come from public install guides and Fedora's spec files (their citations say so).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.citation import Citation
from gpuforge.spec.platforms import Arch, OsFamily, Platform

SOURCES: dict[str, Citation] = {
    "debian12-rdma-core": Citation(
        "Debian 12 packages rdma-core, ibverbs-utils, ibverbs-providers, infiniband-diags, rdmacm-utils 44.0-2",
        "apt-get download + dpkg -c on Debian 12 (bookworm main), 2026-11-26",
        "ibverbs-providers: /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so (Soft-RoCE's provider); "
        "ibverbs-utils: /usr/bin/ibv_devinfo; infiniband-diags: /usr/sbin/ibstat, ibstatus, iblinkinfo; "
        "rdmacm-utils: /usr/bin/rping; rdma-core: /lib/systemd/system/rdma-load-modules@.service, "
        "/etc/rdma/modules/{infiniband,roce,rdma}.conf; Recommends: iproute2",
    ),
    "debian12-perftest": Citation(
        "Debian 12 package perftest 4.5+0.17-1",
        "apt-get download + dpkg -c on Debian 12, 2026-11-26",
        "/usr/bin/ib_write_bw, /usr/bin/ib_read_lat; Depends: ibverbs-providers, libibverbs1, librdmacm1",
    ),
    "debian12-iproute2-rdma": Citation(
        "Debian 12 package iproute2 6.1.0-3",
        "apt-get download + dpkg -c on Debian 12, 2026-11-26",
        "/usr/bin/rdma and its manual pages rdma-link(8), rdma-dev(8): 'rdma link add NAME type TYPE netdev "
        "NETDEV', 'rdma link show [DEV/PORT_INDEX]'",
    ),
    "debian12-openmpi": Citation(
        "Debian 12 packages openmpi-bin / libopenmpi3 4.1.4-3+b1, libopenmpi-dev, ucx-utils 1.13.1-1",
        "apt-get download + dpkg -f / dpkg -c on Debian 12, 2026-11-26",
        "libopenmpi3 Depends: libpmix2 (>= 4.2.2), libucx0 (>= 1.13.1), libibverbs1; ships mca_pml_ucx.so and "
        "mca_pmix_ext3x.so (PMIx from libpmix2); openmpi-bin: /usr/bin/mpirun.openmpi; libopenmpi-dev: "
        "/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h, .../openmpi/lib/libmpi.so (MPI_HOME); ucx-utils: "
        "/usr/bin/ucx_info",
    ),
    "debian12-slurm-pmix": Citation(
        "Debian 12 package slurm-wlm-basic-plugins 22.05.8-4+deb12u3",
        "apt-get download + dpkg -c on Debian 12, 2026-11-26",
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so and mpi_pmix_v4.so (srun --mpi=pmix)",
    ),
    "debian12-kernel-modules": Citation(
        "Debian 12 package linux-image-6.1.0-56-amd64 6.1.192-2 (what linux-image-amd64 depends on)",
        "apt-get download + dpkg -c on Debian 12, 2026-11-26; ../shared/reference/lab-notes.md",
        "kernel/drivers/infiniband/core/{ib_core,ib_uverbs,rdma_ucm,ib_umad}.ko, hw/mlx5/mlx5_ib.ko, "
        "sw/rxe/rdma_rxe.ko, ulp/ipoib/ib_ipoib.ko (the cloud kernel linux-image-cloud-amd64 has no rdma_rxe)",
    ),
    "debian12-slurm-pmix-dlopen": Citation(
        "Debian 12 packages slurm-wlm-basic-plugins 22.05.8-4+deb12u3, libpmix2 / libpmix-dev 4.2.2-1+deb12u1",
        "apt-get download + readelf -d / strings / dpkg -c on Debian 12, 2026-11-26",
        "mpi_pmix_v4.so has no NEEDED libpmix (only libhwloc.so.15, libc.so.6): it opens "
        "'/usr/lib/x86_64-linux-gnu/pmix2/lib' + 'libpmix.so' itself (_libpmix_open); that unversioned "
        "libpmix.so is in libpmix-dev (libpmix2 has only libpmix.so.2): srun --mpi=pmix needs libpmix-dev",
    ),
    "ubuntu-same-sources": Citation(
        "Ubuntu 22.04/24.04 archive: the same source packages (rdma-core, perftest, openmpi, ucx, slurm-wlm)",
        "https://packages.ubuntu.com/jammy/slurm-wlm-basic-plugins ; https://packages.ubuntu.com/noble/perftest",
        "Ubuntu builds Debian's rdma-core, perftest, openmpi, ucx and slurm-wlm sources under the same binary "
        "package names (slurm-wlm-basic-plugins file lists under /usr/lib/<triplet>/slurm-wlm/); the file-level "
        "facts above were checked on Debian 12 only",
    ),
    "el9-rdma": Citation(
        "RHEL 9 / Rocky / Alma package names, as public install guides use them",
        "public guides: 'dnf install -y rdma-core libibverbs-utils infiniband-diags perftest' (RoCE and "
        "Soft-RoCE setup notes); Oracle Linux RDMA docs: 'dnf install librdmacm-utils', 'dnf install mlnx-tools'",
        "rdma-core, libibverbs-utils (ibv_devinfo), librdmacm-utils (rping), infiniband-diags, perftest; "
        "openmpi, ucx and pmix are RHEL 9 AppStream packages of those names (not checked against a RHEL "
        "repository here)",
    ),
    "fedora-slurm-pmix": Citation(
        "Fedora/EPEL slurm.spec",
        "src.fedoraproject.org/rpms/slurm slurm.spec, %files of the base package",
        "'%if %{with pmix}' '%{_libdir}/slurm/mpi_pmix.so' '%{_libdir}/slurm/mpi_pmix_v3.so' '%endif': the "
        "plugin is in the base slurm package when it is built with PMIx (no package of its own)",
    ),
    "slurm-mpidefault": Citation(
        "slurm.conf(5), MpiDefault; Slurm MPI User Guide",
        "https://slurm.schedmd.com/slurm.conf.html#OPT_MpiDefault ; https://slurm.schedmd.com/mpi_guide.html",
        "'MpiDefault: Identifies the default type of MPI to be used. Srun may override this configuration "
        "parameter in any case. Currently supported versions include: pmi2, pmix, and none'; 'The srun option "
        "--mpi= (or the equivalent environment variable SLURM_MPI_TYPE) can be used to specify when a "
        "different PMI implementation is to be used for an individual job'",
    ),
    "slurm-memlock": Citation(
        "Slurm FAQ, 'Why is my MPI job failing due to the locked memory (memlock) limit being too low?'; "
        "slurm.conf(5), PropagateResourceLimitsExcept",
        "https://slurm.schedmd.com/faq.html#memlock ; https://slurm.schedmd.com/slurm.conf.html#OPT_PropagateResourceLimitsExcept",
        "'By default, Slurm propagates all of your resource limits at the time of job submission to the spawned "
        "tasks. This can be disabled by specifically excluding the propagation of specific limits in the "
        "slurm.conf file. For example PropagateResourceLimitsExcept=MEMLOCK might be used to prevent the "
        "propagation of a user's locked memory limit from a login node to a dedicated node used for his "
        "parallel job. If the user's resource limit is not propagated, the limit in effect for the slurmd "
        "daemon will be used for the spawned job'; Debian 13's slurmd unit sets LimitMEMLOCK=infinity; seen in "
        "the lab: UCX's ibv_reg_mr 'failed: Cannot allocate memory : Please set max locked memory (ulimit -l) "
        "to 'unlimited' (current: 8192 kbytes)' in an srun task on a trixie VM",
    ),
    "doca-repo": Citation(
        "NVIDIA DOCA-Host online repository, as public installers configure it",
        "https://linux.mellanox.com/public/repo/doca/<version>/<distro>/<arch>/ ; public scripts: "
        "'https://linux.mellanox.com/public/repo/doca/${DOCA_VERSION}/ubuntu${UBUNTU_VERSION}/x86_64', "
        "'.../doca/3.3.0/ubuntu24.04/$DOCA_ARCH' with 'aarch64|arm64) DOCA_ARCH=\"arm64-sbsa\"', "
        "'.../doca/3.3.0/rhel9/x86_64/' (a Rocky 9 image README)",
        "apt: 'deb [signed-by=/etc/apt/trusted.gpg.d/GPG-KEY-Mellanox.pub] <url>/ ./' with the key from "
        "'https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub'; directories ubuntu22.04, "
        "ubuntu24.04, rhel9; arches x86_64 and arm64-sbsa; no Debian 12 directory was found in any source",
    ),
    "doca-major-releases": Citation(
        "NVIDIA DOCA 3.2.1 General Support (release notes)",
        "https://docs.nvidia.com/doca/archive/3-2-1/general-support/index.html",
        "'As of DOCA 3.2.0, NVIDIA will leverage DKMS to build and install host drivers from source'; 'NVIDIA no "
        "longer provides DOCA-Host for minor OS releases (e.g. RHEL9.X). We only provide major OS releases "
        "builds' (hence the rhel9 directory from 3.2.0 on)",
    ),
    "doca-ofed-meta": Citation(
        "Azure/azhpc-images components/install_doca.sh; DOCA-Host Installation and Upgrade (DOCA 3.2.1)",
        "github.com/Azure/azhpc-images components/install_doca.sh ; "
        "https://docs.nvidia.com/doca/sdk/DOCA-Host+Installation+and+Upgrade",
        "'apt-get -y install doca-ofed' / 'dnf -y install doca-ofed'; 'doca-ofed strict-pins openmpi (= "
        "<doca-version>) which pulls in the DOCA-bundled Open MPI .deb' that 'ships /etc/pmix-mca-params.conf'; "
        "the guide: 'Installed kernel headers that match the version of the currently running kernel'",
    ),
    "doca-key-id": Citation(
        "Mellanox signing key, as public install notes import it",
        "'apt-key adv --keyserver hkp://keyserver.ubuntu.com:80 --recv-keys A024F6F0E6D6A281'",
        "only the long key ID A024F6F0E6D6A281 is published beside the key; no full fingerprint was found, so "
        "the spec pins it (fabric.doca_key_fingerprint)",
    ),
    "mlnx-qos": Citation(
        "NVIDIA mlnx_qos (mlnx-tools; DOCA's mlnx-ofa_kernel 'Requires: mlnx-tools >= 5.2.0')",
        "github.com/Mellanox/mlnx-tools; public RoCE setup notes: 'mlnx_qos -i <if> --trust dscp', "
        "'mlnx_qos -i <if> --pfc 0,0,0,1,0,0,0,0', 'echo 1 > /sys/class/net/<if>/ecn/roce_np/enable/3', "
        "'.../ecn/roce_rp/enable/3'",
        "trust mode, the PFC bit per priority 0-7, and ECN per priority as notification (roce_np) and reaction "
        "(roce_rp) point; mlnx-tools is not a Debian 12 package (apt-cache: none), so QoS needs stack: doca",
    ),
    "nvidia-peermem": Citation(
        "NVIDIA GPU Operator: GPUDirect RDMA; GPUDirect RDMA User Manual",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html ; "
        "https://docs.nvidia.com/networking/display/GPUDirectRDMAv18/Installing+GPUDirect+RDMA",
        "'Starting with CUDA 11.4 and R470 drivers, a new kernel module nvidia-peermem is included in the "
        "standard NVIDIA driver installers'; 'nvidia-peermem kernel module, that is installed as part of the "
        "NVIDIA driver. The nvidia_peermem module is a drop-in replacement for nv_peer_mem'",
    ),
    "peermem-needs-ofed": Citation(
        "NVIDIA GPU Operator: GPUDirect RDMA and GPUDirect Storage (latest; v1.9.1)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html ; "
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/1.9.1/gpu-operator-rdma.html",
        "'The system can register the memory through DMA-BUF in the Linux kernel or the legacy nvidia-peermem "
        "kernel module. NVIDIA recommends using DMA-BUF when it is supported'; nvidia-peermem prerequisites: "
        "'Make sure that MOFED drivers are installed either through Network Operator or directly on the host' "
        "(the peer-memory interface it registers with is MLNX_OFED/DOCA-OFED's, not the upstream kernel's)",
    ),
    "nccl-packages": Citation(
        "NVIDIA NCCL in the CUDA repositories, as public installers pin it; NCCL Installation Guide",
        "https://docs.nvidia.com/deeplearning/nccl/install-guide/index.html ; public scripts: 'apt install "
        "libnccl2=2.27.7-1+cuda13.0 libnccl-dev=2.27.7-1+cuda13.0', 'libnccl2=${NCCL_VERSION}+cuda12.9' "
        "(NCCL_VERSION=2.29.3-1, from developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64); "
        "Azure/azhpc-images install_nccl.sh 'libnccl-${NCCL_VERSION}+cuda${CUDA}.x86_64.rpm', "
        "'libnccl-devel-...'",
        "deb: libnccl2 and libnccl-dev at '<nccl>+cuda<x.y>'; rpm: libnccl and libnccl-devel at the same "
        "version; builds exist per CUDA release (2.27.7-1 for cuda12.9 and cuda13.0)",
    ),
    "gdrcopy-redist": Citation(
        "NVIDIA GDRCopy packages under developer.download.nvidia.com/compute/redist/gdrcopy",
        "vllm-project/vllm tools/install_gdrcopy.sh (GDRCOPY_VERSION default 2.5.1-1); public notes: "
        "'.../redist/gdrcopy/CUDA%2013.0/ubuntu22_04/x64/gdrdrv-dkms_2.5.1-1_amd64.Ubuntu22_04.deb', "
        "'libgdrapi_2.5.1-1_amd64.Ubuntu22_04.deb', '.../CUDA%2012.8/ubuntu24_04/x64/gdrcopy_2.5.1-1_amd64."
        "Ubuntu24_04.deb'",
        "'URL=${BASE_URL}/CUDA%20${CUDA_VER}/${OS_VER_LOWER}/${URL_ARCH}/${DEB_NAME}' with URL_ARCH x64 or "
        "aarch64 and DEB_ARCH amd64 or arm64; Ubuntu files only are cited (RHEL's kmod rpm name carries a "
        "distribution tag no source states)",
    ),
    "nccl-tests-build": Citation(
        "NVIDIA/nccl-tests README.md (Build); release archives as public builds fetch them",
        "github.com/NVIDIA/nccl-tests README.md ; "
        "'https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.18.3.tar.gz' ('cd nccl-tests-2.18.3/')",
        "'make MPI=1 MPI_HOME=/path/to/mpi CUDA_HOME=/path/to/cuda NCCL_HOME=/path/to/nccl'; 'If CUDA is not "
        "installed in /usr/local/cuda, you may specify CUDA_HOME. Similarly, if NCCL is not installed in /usr, "
        "you may specify NCCL_HOME'; binaries in ./build (./build/all_reduce_perf)",
    ),
    "sharp-plugin-build": Citation(
        "Mellanox/nccl-rdma-sharp-plugins README.md, configure.ac, m4/sharp.m4, src/Makefile.am, debian/control.in",
        "github.com/Mellanox/nccl-rdma-sharp-plugins (snapshot of 2026-04-02, commit 2f5ac02e; tags v1.0, "
        "v2.0.0, v2.0.1, v2.1.0 and hpcx-v2.6 to hpcx-v2.8.0, newer code on branches v2.2.x ... v2.28.x)",
        "README: requirements 'MOFED, CUDA, SHARP, NCCL, GPUDirectRDMA plugin'; './autogen.sh', './configure', "
        "'make', 'make install'; '--with-sharp=PATH Path to non-standard SHARP installation', '--with-cuda=PATH'; "
        "sharp.m4 looks in $HPCX_SHARP_DIR, then '/opt/mellanox/sharp/' for sharp/api/sharp_coll.h and "
        "-lsharp_coll, and with --with-sharp=DIR: 'SHARP support is requested but SHARP packages cannot be "
        "found' when they are not there; configure.ac: 'CUDA runtime header files not found' without "
        "cuda_runtime.h; src/Makefile.am: 'lib_LTLIBRARIES = libnccl-net.la' (libnccl-net.so); the Debian "
        "packaging (debian/control.in, 'Build-Depends: libibverbs-dev') is for building a .deb from the "
        "source: no distribution or NVIDIA repository package of it was found",
    ),
    "sharp-plugin-channels": Citation(
        "NVIDIA SHARP Rev 3.9.1 LTS: Using NVIDIA SHARP with NVIDIA NCCL; HPC-X 2.26: NCCL-RDMA-SHARP Plugins",
        "https://docs.nvidia.com/networking/display/sharpltsv391/using+nvidia+sharp+with+nvidia+nccl ; "
        "https://docs.nvidia.com/networking/display/hpcxv226/NCCL-RDMA-SHARP-Plugins",
        "'The NCCL-SHARP plugin is distributed through the following channels: Binary distribution with "
        "HPC-X ... Source distribution: https://github.com/Mellanox/nccl-rdma-sharp-plugins User can build the "
        "plugin from the source and set LD_LIBRARY_PATH to use it by NCCL'; requirements 'NVIDIA ConnectX-6 "
        "HDR and above', 'NVIDIA Quantum HDR switch and above', 'DOCA-Host', 'GPUDirectRDMA', 'NCCL version "
        "2.7.3 or higher'; HPC-X: '# libnccl_net.so is in <plugin_install_dir>/lib'; 'NCCL_IBEXT_DISABLE=1 "
        "disables the plugin'; 'NCCL_COLLNET_ENABLE=1' enables SHARP "
        "aggregation",
    ),
    "doca-ubuntu-verbs-dev": Citation(
        "NVIDIA/hpc-container-maker docs/building_blocks.md, doca_ofed building block (pull request 507)",
        "https://github.com/NVIDIA/hpc-container-maker/pull/507",
        "'packages: List of packages to install from Mellanox OFED. For Ubuntu, the default values are "
        "ibverbs-providers, ibverbs-utils libibmad-dev, libibmad5, libibumad3, libibumad-dev, libibverbs-dev "
        "libibverbs1, librdmacm-dev, and librdmacm1' (DOCA's Ubuntu repository has libibverbs-dev)",
    ),
    "nccl-net-plugin": Citation(
        "NCCL Net plugin API (NCCL's ext-net documentation, as RCCL's 'Using NCCL Net Plugin' reproduces it); "
        "NCCL Environment Variables",
        "https://rocm.docs.amd.com/projects/rccl/en/docs-6.3.0/how-to/using-nccl.html ; "
        "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html",
        "'When NCCL is initialized, it will look for a libnccl-net.so library and dynamically load it'; "
        "'If set, NCCL will look for a library with a name of libnccl-net-${NCCL_NET_PLUGIN}.so'; env.html: "
        "'Environment variables can also be set statically in /etc/nccl.conf (for an administrator to set "
        "system-wide values)'",
    ),
    "ldconfig": Citation(
        "ldconfig(8) (Linux man-pages); Debian 12 /etc/ld.so.conf",
        "https://man7.org/linux/man-pages/man8/ldconfig.8.html ; cat /etc/ld.so.conf on Debian 12.11, 2026-11-26",
        "'ldconfig creates the necessary links and cache to the most recent shared libraries found in the "
        "directories specified ... in the file /etc/ld.so.conf'; 'The cache is used by the run-time linker'; "
        "'ldconfig will look only at files that are named lib*.so*'; /etc/ld.so.conf: 'include "
        "/etc/ld.so.conf.d/*.conf'",
    ),
    "cuda-install-path": Citation(
        "NVIDIA CUDA Installation Guide for Linux 12.4, Post-installation Actions",
        "https://docs.nvidia.com/cuda/archive/12.4.0/cuda-installation-guide-linux/index.html#post-installation-actions",
        "'The PATH variable needs to include export PATH=/usr/local/cuda-12.4/bin${PATH:+:${PATH}}' (the "
        "cuda-toolkit-12-4 package's prefix, CUDA_HOME of a build)",
    ),
    "enroot-rdma": Citation(
        "NVIDIA/enroot doc/configuration.md, doc/standard-hooks.md, conf/hooks/10-devices.sh, 99-mellanox.sh",
        "github.com/NVIDIA/enroot",
        "'Pre-start hooks ... standard bash scripts with the .sh extension and run with full capabilities "
        "before the container has switched to its final root' (hooks.d); 10-devices.sh (ENROOT_RESTRICT_DEV, "
        "set by gpuforge) mounts a tmpfs over /dev with a minimal set of devices; 99-mellanox.sh exposes only "
        "mlx4/mlx5 devices, and only when MELLANOX_VISIBLE_DEVICES is set; enroot-mount options "
        "'x-create=dir', 'rbind', 'nofail', 'silent'",
    ),
    "rhel9-networkmanager": Citation(
        "Red Hat Enterprise Linux 9: Configuring and managing networking; nm-settings-keyfile(5)",
        "https://docs.redhat.com/en/documentation/red_hat_enterprise_linux/9/html/configuring_and_managing_networking/ "
        "; https://networkmanager.dev/docs/api/latest/nm-settings-keyfile.html",
        "RHEL 9 configures networks with NetworkManager, its profiles keyfiles in "
        "/etc/NetworkManager/system-connections/ (root-owned, 0600); an IPoIB profile: '[connection] type=infiniband', "
        "'[infiniband] transport-mode=datagram', '[ipv4] method=manual address1=<address>/<prefix>'; 'nmcli "
        "connection reload' reads changed files (as public IPoIB keyfile writers use them)",
    ),
    "systemd-networkd": Citation(
        "systemd.network(5)",
        "https://www.freedesktop.org/software/systemd/man/latest/systemd.network.html",
        "[Match] Name= ; [Network] Address= 'A static IPv4 or IPv6 address and its prefix length, separated by "
        'a "/" character\'; [Link] RequiredForOnline=no',
    ),
    "debian13-fabric": Citation(
        "Debian 13 archive (trixie; Release 13.8, 2026-11-21), read with apt from Debian's archive (2026-11-29)",
        "https://packages.debian.org/trixie/rdma-core ; https://packages.debian.org/trixie/perftest ; "
        "https://packages.debian.org/trixie/openmpi-bin ; https://packages.debian.org/trixie/libpmix-dev ; "
        "https://packages.debian.org/trixie/ucx-utils",
        "rdma-core, ibverbs-providers, ibverbs-utils, infiniband-diags, rdmacm-utils 56.1-1; perftest "
        "25.01.0+0.80-1; openmpi-bin and libopenmpi-dev 5.0.7-1 (library libopenmpi40); ucx-utils 1.18.1+ds-2+b1; "
        "libpmix-dev 5.0.7-1 ('Depends: libpmix2t64 (= 5.0.7-1)'); slurm-wlm-basic-plugins 24.11.5-4+deb13u1 "
        "'Depends: ... libpmix2t64' with mpi_pmix.so -> mpi_pmix_v5.so (the names Debian 12's rows use)",
    ),
}


@dataclass(frozen=True)
class DistroStack:
    """A distribution's own RDMA stack and MPI, by package name."""

    rdma: tuple[str, ...]
    """rdma-core, the verbs providers and tools (ibv_devinfo, ibstat, rping) and iproute2's rdma."""
    perftest: str
    mpi: tuple[str, ...]
    """OpenMPI with UCX (and its ucx_info) and PMIx."""
    mpi_dev: tuple[str, ...]
    """What a build against that MPI needs (nccl-tests)."""
    mpi_home: str
    """MPI_HOME of that OpenMPI (include/ and lib/ below it); ``{triplet}``: the GNU triplet."""
    slurm_pmix: tuple[str, ...]
    """The distribution's Slurm: its mpi_pmix.so and what that opens at run time (every Slurm node with
    ``MpiDefault=pmix``). SchedMD's debs carry the plugin in slurm-smd, which conflicts with Debian's
    (``slurm_packages.runtime_packages`` names what they need instead)."""
    cites: tuple[str, ...]


_DEB = DistroStack(
    rdma=("rdma-core", "ibverbs-providers", "ibverbs-utils", "infiniband-diags", "rdmacm-utils", "iproute2"),
    perftest="perftest",
    mpi=("openmpi-bin", "ucx-utils"),
    mpi_dev=("libopenmpi-dev",),
    mpi_home="/usr/lib/{triplet}/openmpi",
    slurm_pmix=("slurm-wlm-basic-plugins", "libpmix-dev"),
    cites=("debian12-rdma-core", "debian12-perftest", "debian12-iproute2-rdma", "debian12-openmpi",
           "debian12-slurm-pmix", "debian12-slurm-pmix-dlopen"),
)  # fmt: skip
_EL9 = DistroStack(
    rdma=("rdma-core", "libibverbs-utils", "infiniband-diags", "librdmacm-utils", "iproute"),
    perftest="perftest",
    mpi=("openmpi", "ucx", "pmix"),
    mpi_dev=("openmpi-devel",),
    mpi_home="/usr/lib64/openmpi",
    slurm_pmix=("pmix",),  # mpi_pmix.so: in the base slurm package when built with PMIx (fedora-slurm-pmix)
    cites=("el9-rdma", "fedora-slurm-pmix"),
)

DISTRO_STACKS: dict[OsFamily, DistroStack] = {
    OsFamily.DEBIAN12: _DEB,
    OsFamily.DEBIAN13: DistroStack(**{**_DEB.__dict__, "cites": ("debian13-fabric", "debian12-slurm-pmix-dlopen")}),
    OsFamily.UBUNTU2204: DistroStack(**{**_DEB.__dict__, "cites": (*_DEB.cites, "ubuntu-same-sources")}),
    OsFamily.UBUNTU2404: DistroStack(**{**_DEB.__dict__, "cites": (*_DEB.cites, "ubuntu-same-sources")}),
    OsFamily.RHEL9: _EL9,
    OsFamily.ROCKY9: _EL9,
    OsFamily.ALMA9: _EL9,
}

# --------------------------------------------------------------------------- kernel modules

#: Loaded on every fabric node: the verbs and RDMA CM user-space interfaces (/dev/infiniband/uverbs*,
#: rdma_cm); the HCA's own driver (mlx5_ib) is loaded by udev for its PCI device.
BASE_MODULES = ("ib_uverbs", "rdma_ucm")
IPOIB_MODULE = "ib_ipoib"
SOFT_ROCE_MODULE = "rdma_rxe"
PEERMEM_MODULE = "nvidia_peermem"
GDRCOPY_MODULE = "gdrdrv"
MODULE_CITES = ("debian12-kernel-modules", "nvidia-peermem", "gdrcopy-redist")

# --------------------------------------------------------------------------- DOCA-OFED

DOCA_UPSTREAM = "https://linux.mellanox.com/public/repo/doca"
DOCA_KEY_FILE = "GPG-KEY-Mellanox.pub"
DOCA_KEY_URL = f"{DOCA_UPSTREAM}/{DOCA_KEY_FILE}"
DOCA_PACKAGES = ("doca-ofed",)
#: DOCA's directory per distribution (doca-repo); None: no DOCA repository is cited for it.
DOCA_DISTRO: dict[OsFamily, str | None] = {
    OsFamily.DEBIAN12: None,
    OsFamily.DEBIAN13: None,
    OsFamily.UBUNTU2204: "ubuntu22.04",
    OsFamily.UBUNTU2404: "ubuntu24.04",
    OsFamily.RHEL9: "rhel9",
    OsFamily.ROCKY9: "rhel9",
    OsFamily.ALMA9: "rhel9",
}
DOCA_ARCH: dict[Arch, str] = {Arch.X86_64: "x86_64", Arch.AARCH64: "arm64-sbsa"}
#: From this DOCA release the EL directory is the major release (doca-major-releases).
DOCA_EL_MAJOR_FROM = (3, 2, 0)
#: Where DOCA's own OpenMPI lies (doca-ofed depends on it, doca-ofed-meta): MPI_HOME is found there.
DOCA_MPI_GLOB = "/usr/mpi/gcc/openmpi-*"


def doca_repo_path(platform: Platform, version: str) -> str | None:
    """``<version>/<distro>/<arch>`` of DOCA's repository for the platform (None: no cited directory)."""
    distro = DOCA_DISTRO[platform.os]
    return None if distro is None else f"{version}/{distro}/{DOCA_ARCH[platform.arch]}"


def release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


# --------------------------------------------------------------------------- NCCL, GDRCopy, nccl-tests


def nccl_packages(deb: bool, nccl: str, cuda: str) -> tuple[str, ...]:
    """NCCL pinned (``name=version`` as the layer's pins read it) from NVIDIA's CUDA repository."""
    version = f"{nccl}+cuda{cuda}"
    names = ("libnccl2", "libnccl-dev") if deb else ("libnccl", "libnccl-devel")
    return tuple(f"{n}={version}" for n in names)


GDRCOPY_REDIST = "https://developer.download.nvidia.com/compute/redist/gdrcopy"
#: GDRCopy's redist directory and file tag per distribution (gdrcopy-redist); Ubuntu only is cited.
GDRCOPY_OS: dict[OsFamily, tuple[str, str]] = {
    OsFamily.UBUNTU2204: ("ubuntu22_04", "Ubuntu22_04"),
    OsFamily.UBUNTU2404: ("ubuntu24_04", "Ubuntu24_04"),
}
GDRCOPY_ARCH: dict[Arch, str] = {Arch.X86_64: "x64", Arch.AARCH64: "aarch64"}
GDRCOPY_PACKAGES = ("gdrdrv-dkms", "libgdrapi", "gdrcopy")


def gdrcopy_files(platform: Platform, version: str, cuda: str) -> list[tuple[str, str]] | None:
    """(file name, URL) of GDRCopy's kernel module, library and tools (None: not cited for the platform)."""
    row = GDRCOPY_OS.get(platform.os)
    if row is None:
        return None
    directory, tag = row
    base = f"{GDRCOPY_REDIST}/CUDA%20{cuda}/{directory}/{GDRCOPY_ARCH[platform.arch]}"
    names = [f"{p}_{version}_{platform.package_arch}.{tag}.deb" for p in GDRCOPY_PACKAGES]
    return [(n, f"{base}/{n}") for n in names]


NCCL_TESTS_TAGS = "https://github.com/NVIDIA/nccl-tests/archive/refs/tags"
NCCL_TESTS_DIR = "/opt/nccl-tests"
#: The tests nccl-tests builds that validate runs (nccl-tests-build: ./build/<test>).
NCCL_TESTS_BINARY = "all_reduce_perf"


def nccl_tests_file(version: str) -> tuple[str, str]:
    """(file name, URL) of the nccl-tests source archive of a release."""
    return f"nccl-tests-{version}.tar.gz", f"{NCCL_TESTS_TAGS}/v{version}.tar.gz"


def cuda_home(cuda_toolkit: str) -> str:
    """Where NVIDIA's cuda-toolkit-<x>-<y> package installs (cuda-install-path): CUDA_HOME of the build."""
    return f"/usr/local/cuda-{cuda_toolkit}"


# --------------------------------------------------------------------------- NCCL-RDMA-SHARP plugin

SHARP_PLUGIN_TAGS = "https://github.com/Mellanox/nccl-rdma-sharp-plugins/archive/refs/tags"
SHARP_PLUGIN_DIR = "/opt/nccl-rdma-sharp-plugins"
#: Where the plugin's configure finds SHARP's header and library (sharp-plugin-build: sharp.m4's own
#: fallback); given explicitly so a node without SHARP fails the build instead of building RDMA only.
SHARP_DIR = "/opt/mellanox/sharp"
#: The library NCCL loads (nccl-net-plugin); ``make install`` puts it in <prefix>/lib.
SHARP_PLUGIN_LIBRARY = "libnccl-net.so"
#: What autogen.sh and the build need besides CUDA and SHARP on Ubuntu (sharp-plugin-build: GNU autotools,
#: libibverbs-dev; doca-ubuntu-verbs-dev: DOCA's repository has libibverbs-dev). EL: none cited.
SHARP_PLUGIN_BUILD_DEPS = ("autoconf", "automake", "libtool", "make", "gcc", "libibverbs-dev")
SHARP_PLUGIN_CITES = (
    "sharp-plugin-build",
    "doca-ubuntu-verbs-dev",
    "sharp-plugin-channels",
    "nccl-net-plugin",
    "ldconfig",
)


def sharp_plugin_file(version: str) -> tuple[str, str]:
    """(file name, URL) of the nccl-rdma-sharp-plugins source archive of the release tag ``v<version>``."""
    return f"nccl-rdma-sharp-plugins-{version}.tar.gz", f"{SHARP_PLUGIN_TAGS}/v{version}.tar.gz"
