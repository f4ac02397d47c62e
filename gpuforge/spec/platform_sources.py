"""Where the platform table (``gpuforge/spec/platforms.py``) comes from: one citation per key.

Every ``ArchNames.sources`` and ``Distribution.sources`` key names an entry of :data:`SOURCES`;
``tests/spec/test_platforms.py`` checks that, and that every entry here is named by a row or
listed in :data:`OUTSIDE_ROWS` with what reads it. ``section`` quotes or closely paraphrases the
words of the source that state the fact.

Directory listings are NVIDIA's download server as stored (``Index of /compute/cuda/repos/...``);
a listing says what exists, not what is supported, so each repository fact names the listing and,
where there is one, the document or NVIDIA-maintained code that uses the path.
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

CUDA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos"
GUIDE = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide"
LIBNVIDIA_CONTAINER = "https://nvidia.github.io/libnvidia-container"

#: How the Debian 13 facts below were read (Release 13.8 of 2026-11-21).
_TRIXIE = "Debian 13 archive (trixie, trixie-security; Release 13.8), read with apt from Debian's archive (2026-11-29)"

SOURCES: dict[str, Citation] = {
    # --- CPU architecture names (ArchNames) ---------------------------------------------------
    "debian-ports": Citation(
        "Debian 12 (bookworm) Installation Guide, 2.1.1 Supported Architectures; Ubuntu Installation Guide, "
        "2.1.1 Supported Architectures",
        "https://www.debian.org/releases/bookworm/arm64/ch02s01.en.html ; "
        "https://help.ubuntu.com/20.04/installation-guide/arm64/ch02s01.html",
        "'Debian GNU/Linux 12 supports 9 major architectures': Architecture / Debian Designation: "
        "'AMD64 & Intel 64 | amd64', '64bit ARM | arm64' (the names dpkg --print-architecture prints); Ubuntu's "
        "table, Architecture / Ubuntu Designation: 'AMD64 & Intel 64 | amd64', '64bit ARM | arm64'",
    ),
    "cuda-repos-x86_64": Citation(
        "NVIDIA CUDA repositories: directory listings of the x86_64 trees",
        f"{CUDA_REPOS}/ubuntu2404/x86_64/ ; {CUDA_REPOS}/debian12/x86_64/ ; "
        f"{CUDA_REPOS}/rhel8/x86_64/cuda-rhel8.repo (rhel9 alike)",
        "'Index of /compute/cuda/repos/ubuntu2404/x86_64': '3bf863cc.pub', 'InRelease', 'Packages', "
        "'collectx-bringup_1.22.1-1_amd64.deb', 'cuda-12-3_12.3.0-1_amd64.deb' ...; 'Index of "
        "/compute/cuda/repos/debian12/x86_64': the same layout with *_amd64.deb: the directory is x86_64 "
        "while the packages in it carry dpkg's amd64; rpm trees hold <name>-<v>.x86_64.rpm",
    ),
    "cuda-repos-sbsa": Citation(
        "NVIDIA CUDA repositories: directory listings of the arm64 server (SBSA) trees; "
        "NVIDIA/ansible-role-nvidia-driver vars/main.yml (commit 705bb08, release v2.3.1)",
        f"{CUDA_REPOS}/ubuntu2404/sbsa ; {CUDA_REPOS}/ubuntu2204/sbsa/ ; {CUDA_REPOS}/rhel10/sbsa ; "
        "github.com/NVIDIA/ansible-role-nvidia-driver vars/main.yml",
        "'Index of /compute/cuda/repos/ubuntu2404/sbsa': '3bf863cc.pub', 'InRelease', 'Packages', "
        "'collectx-bringup_1.22.1-1_arm64.deb', 'cublasmp0_0.8.0-1_arm64.deb' ...; 'Index of "
        "/compute/cuda/repos/ubuntu2204/sbsa': likewise *_arm64.deb; rhel10/sbsa holds <name>-<v>.aarch64.rpm. "
        "NVIDIA's role: 'NVidia's name for aarch64 is \"sbsa\"'; _rhel_repo_dir: \"rhel{{ major }}/{{ "
        "ansible_architecture | replace('aarch64', 'sbsa') }}\" and _ubuntu_repo_dir likewise (ubuntu2204/sbsa, "
        "ubuntu2404/sbsa, rhel9/sbsa). The sbsa directory holds dpkg arm64 / rpm aarch64 packages. "
        "debian12: '.../debian12/cross-linux-sbsa/Packages' (Architecture: all, cross-compilation packages) is "
        "stored; no listing of debian12/sbsa is stored, but third-party code written in 2026 installs "
        "'.../debian12/sbsa/cuda-keyring_1.1-1_all.deb' and reports from its Packages.gz 'debian12/sbsa "
        "590..615' (nvidia-kernel-open-dkms branches) and that it 'publishes only CUDA 13.x'",
    ),
    "go-arch": Citation(
        "Installing Go from source, Optional environment variables ($GOOS and $GOARCH); "
        "helm/helm scripts/get-helm-3 (initArch)",
        "https://go.dev/doc/install/source#environment ; github.com/helm/helm scripts/get-helm-3",
        "'Choices for $GOARCH are amd64 (64-bit x86, the most mature port), 386 (32-bit x86), arm (32-bit ARM), "
        "arm64 (64-bit ARM) ...'; valid combinations include 'linux amd64' and 'linux arm64'. Release archives "
        "carry it: get-helm-3 maps uname -m 'aarch64) ARCH=\"arm64\"', 'x86_64) ARCH=\"amd64\"'",
    ),
    "debian-multiarch": Citation(
        "Debian wiki: Multiarch Architecture Specifiers (Tuples)",
        "https://wiki.debian.org/Multiarch/Tuples",
        "'We use normalized GNU triplets for most tuples'; multiarch names 'aarch64-linux-gnu | ARM64 | linux | "
        "little | 64' and 'x86_64-linux-gnu' (amd64); 'the Debian architecture name associated to a triplet can "
        'be retrieved with "dpkg-architecture -t<triplet> -qDEB_HOST_ARCH"\' (libraries in /usr/lib/<triplet>)',
    ),
    # --- distributions (Distribution) -----------------------------------------------------------
    "cuda-repos-index": Citation(
        "NVIDIA CUDA repositories: the repository root; NVIDIA Driver Installation Guide, Introduction, "
        "Linux System Requirements",
        f"{CUDA_REPOS}/ ; {GUIDE}/610/introduction.html",
        "'Index of /compute/cuda/repos': ... 'debian12/', ... 'rhel9/', ... 'ubuntu2204/', 'ubuntu2404/' ...; "
        'the guide: \'The values in the "Codename" and "Architecture" columns are used to substitute the '
        "<distro> and <arch> placeholders': 'Red Hat Enterprise Linux 9 | rhel9', 'Ubuntu 24.04 LTS | "
        "ubuntu2404', 'Ubuntu 22.04 LTS | ubuntu2204', 'Debian 12 | debian12' (amd64 systems)",
    ),
    "debian-headers": Citation(
        "Debian package linux-headers-amd64 (bookworm, kernel); linux-headers-arm64 (bookworm)",
        "https://packages.debian.org/bookworm/linux-headers-amd64 ; "
        "https://packages.debian.org/bookworm/linux-headers-arm64",
        "'Header files for Linux amd64 configuration (meta-package)': 'This package depends on the "
        "architecture-specific header files for the latest Linux kernel amd64 configuration' (dep: "
        "linux-headers-6.1.0-41-amd64); the arm64 package reads the same with arm64",
    ),
    "ubuntu-headers": Citation(
        "Ubuntu package linux-headers-generic (noble, noble-updates; jammy alike)",
        "https://packages.ubuntu.com/noble/linux-headers-generic ; "
        "https://packages.ubuntu.com/noble-updates/arm64/linux-headers-generic",
        "'Generic Linux kernel headers' (source linux-meta): Download: 'amd64 | 6.8.0-138.138', "
        "'arm64 | 6.8.0-31.31'; noble-updates arm64: 'linux-headers-generic (6.8.0-138.138) [ports]'. "
        "The same name on both architectures; arm64 also has linux-headers-generic-64k ('Generic 64K Linux "
        "kernel headers') for the 64K-page kernel flavor",
    ),
    "guide-el-distributions": Citation(
        "NVIDIA Driver Installation Guide: Kernel Modules, Table 5 (620); Introduction, Linux System "
        "Requirements (610)",
        f"{GUIDE}/620/kernel-modules.html ; {GUIDE}/610/introduction.html",
        "Table 5 'Open GPU kernel module installation': one row 'Red Hat Enterprise Linux 8/9, AlmaLinux 8/9, "
        "Oracle Linux 8/9, Amazon Linux 2023, Rocky Linux 8/9': '# dnf module enable nvidia-driver:open-dkms', "
        "'# dnf install nvidia-open'. Introduction: 'AlmaLinux 9 | rhel9 | x86_64', 'Rocky Linux 9 | rhel9 | "
        "x86_64' (the codename that substitutes <distro>, so both use NVIDIA's rhel9 repositories); arm64 "
        "systems (SBSA): 'Red Hat Enterprise Linux 9 | rhel9 | aarch64'",
    ),
    "os-release": Citation(
        "os-release(5) (freedesktop.org / systemd) and the distributions' own files",
        "https://www.freedesktop.org/software/systemd/man/latest/os-release.html ; recorded here: "
        "tests/facts/fixtures/platform/os_release_debian12_x86_64.json ; captures: yorevs/homesetup "
        "docs/misc/linux-releases.md (Ubuntu 22.04), cul-it/ct-patching-scanning etc-os-release-examples.md (RHEL), "
        "tsr-hataya/linux-server-text almalinux9.2_osinfo.md (AlmaLinux 9.2)",
        "os-release(5): 'ID= A lower-case string ... identifying the operating system'; 'VERSION_ID= A lower-case "
        "string ... identifying the operating system version'; values may be quoted. Debian 12: 'ID=debian', "
        "'VERSION_ID=\"12\"'; Ubuntu: 'ID=ubuntu', 'VERSION_ID=\"22.04\"'; RHEL: 'ID=\"rhel\"', 'VERSION_ID=\"7.5\"' "
        "(the point release after the major); Rocky: 'ID=\"rocky\"'; AlmaLinux 9.2: 'ID=\"almalinux\"', "
        "'VERSION_ID=\"9.2\"'",
    ),
    # --- Debian 13 (trixie): read with apt from Debian's archive on 2026-11-29 (Release 13.8) ----------
    "debian13-release": Citation(
        "Debian 13: os-release (base-files 13.8+deb13u8), Installation Guide (trixie) 2.1.1, distro-info-data",
        "https://packages.debian.org/trixie/base-files ; "
        "https://www.debian.org/releases/trixie/amd64/ch02s01.en.html ; "
        "https://salsa.debian.org/debian/distro-info-data (debian.csv)",
        "os-release: 'PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"', 'VERSION_ID=\"13\"', 'VERSION_CODENAME=trixie', "
        "'ID=debian'; Installation Guide: 'Debian GNU/Linux 13 supports 6 major architectures': 'AMD64 & Intel 64 | "
        "amd64', '64bit ARM | arm64', ...; debian.csv: '13,Trixie,trixie,2023-06-10,2025-08-09,2028-08-09,2030-06-30'",
    ),
    "debian13-headers": Citation(
        "Debian packages linux-headers-amd64 and linux-headers-arm64 (trixie, trixie-security)",
        "https://packages.debian.org/trixie/linux-headers-amd64 ; https://packages.debian.org/trixie/linux-headers-arm64",
        "'Package: linux-headers-amd64 / Source: linux-signed-amd64 (6.12.117+1) / Version: 6.12.117-1 / Provides: "
        "linux-headers-generic / Depends: linux-headers-6.12.117+deb13-amd64 (= 6.12.117-1)'; trixie-security: "
        "6.12.118-1; arm64 alike ('linux-headers-arm64 ... 6.12.118-1'). " + _TRIXIE,
    ),
    "debian13-slurm-plugins": Citation(
        "Debian package slurm-wlm-basic-plugins 24.11.5-4+deb13u1 (trixie, trixie-security), file lists",
        "https://packages.debian.org/trixie/amd64/slurm-wlm-basic-plugins/filelist ; "
        "https://packages.debian.org/trixie/arm64/slurm-wlm-basic-plugins/filelist",
        "dpkg -c slurm-wlm-basic-plugins_24.11.5-4+deb13u1_amd64.deb: './usr/lib/x86_64-linux-gnu/slurm-wlm/"
        "auth_munge.so', '.../slurm-wlm/cgroup_v2.so', '.../slurm-wlm/mpi_pmix.so -> mpi_pmix_v5.so'; arm64: "
        "'./usr/lib/aarch64-linux-gnu/slurm-wlm/auth_munge.so' (the plugin directory as on Debian 12). " + _TRIXIE,
    ),
    "debian13-nfs": Citation(
        "Debian packages nfs-kernel-server and nfs-common (trixie)",
        "https://packages.debian.org/trixie/nfs-kernel-server ; https://packages.debian.org/trixie/nfs-common",
        "'Package: nfs-kernel-server / Version: 1:2.8.3-1', 'Package: nfs-common / Version: 1:2.8.3-1' (the names "
        "Debian 12 uses). " + _TRIXIE,
    ),
    "debian13-nvidia": Citation(
        "Debian 13 archive: nvidia-driver, nvidia-open-kernel-dkms, nvidia-persistenced (non-free, contrib)",
        "https://packages.debian.org/trixie/nvidia-driver ; https://packages.debian.org/trixie/nvidia-open-kernel-dkms "
        "; https://packages.debian.org/trixie/amd64/nvidia-persistenced/filelist",
        "'Package: nvidia-driver / Source: nvidia-graphics-drivers / Version: 550.163.01-2' (non-free, amd64 and "
        "arm64; the archive's one branch of the main driver); 'Package: nvidia-open-kernel-dkms / Version: "
        "550.163.01-2' (contrib); nvidia-persistenced 550.163.01-1's unit: '[Unit] Description=NVIDIA Persistence "
        "Daemon / Wants=syslog.target / [Service] Type=forking / ExecStart=/usr/bin/nvidia-persistenced --user nvpd' "
        "(no StopWhenUnneeded, no --no-persistence-mode; WantedBy=multi-user.target). " + _TRIXIE,
    ),
    "debian13-cuda-repo": Citation(
        "NVIDIA/cuda-repo-management issues #39, #34, #38, #41 (NVIDIA maintainer kmittman); CUDA Installation "
        "Guide for Linux 13.2, Tables 1 and 2",
        "https://github.com/NVIDIA/cuda-repo-management/issues/39 ; .../issues/34 ; .../issues/38 ; "
        ".../issues/41 ; https://docs.nvidia.com/cuda/cuda-installation-guide-linux/index.html",
        "#39: 'Debian 13 is signed with the new key (8793F200)'; kmittman: 'we try to avoid rotating GPG keys for "
        "existing repos; as such only a new key for Debian 13'. #34: 'Debian 13 (Trixie) uses Sequoia-PGP which "
        "will reject SHA1 signatures after 2026-02-01'. #38 'Debian 13 Repository Missing Older Drivers' (open). "
        "#41: DCGM 'currently provides packages in the following CUDA repos * amzn2023 * azl3 * debian12 * rhel8 "
        "* rhel9 * rhel10 * sles15 * ubuntu2204 * ubuntu2404'. Guide Table 1: 'Debian 13 | debian13 | amd64' "
        "(no Debian row under arm64 systems (SBSA)); Table 2: Debian 13 under 'GRACE only arm64 systems (sbsa)'",
    ),
    "debian13-cgroup-v2": Citation(
        "systemd NEWS, 'CHANGES WITH 257', as shipped in Debian 13's systemd 257.13-1~deb13u1",
        "https://github.com/systemd/systemd/blob/v257/NEWS ; https://packages.debian.org/trixie/systemd",
        "'Support for cgroup v1 ('legacy' and 'hybrid' hierarchies) is now considered obsolete and systemd by "
        "default will ignore configuration that enables them. To forcibly reenable cgroup v1 support, "
        "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1 must additionally be set on the kernel command line.'",
    ),
    "rhel-crb": Citation(
        "Fedora EPEL documentation, Getting started: RHEL 9",
        "https://docs.fedoraproject.org/en-US/epel/#_rhel_9",
        "'subscription-manager repos --enable codeready-builder-for-rhel-9-$(arch)-rpms' then 'dnf install "
        "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm' (EPEL packages need CRB); "
        "the same commands are quoted from that page by public scripts ('These commands came from the "
        "installation instructions for EPEL on RHEL 9')",
    ),
    "rebuild-crb": Citation(
        "AlmaLinux wiki: AlmaLinux Repositories; Rocky Linux wiki: Rocky Linux Repositories",
        "github.com/AlmaLinux/wiki docs/repos/AlmaLinux.md (wiki.almalinux.org/repos/AlmaLinux.html); "
        "github.com/rocky-linux/wiki.rockylinux.org docs/rocky/repo.md (wiki.rockylinux.org/rocky/repo/)",
        "AlmaLinux: 'PowerTools/CRB ... also known as the \"CodeReady Builder\" repository used on RHEL' - How to "
        "Enable on AlmaLinux 9: '# dnf config-manager --set-enabled crb'. Rocky: 'CRB | Rocky 9: Yes | Enabled: "
        "No'; 'This can also be modified using dnf config-manager --set-enabled'; 'CRB is \"Code Ready Builder\"'. "
        "dnf config-manager comes from dnf-plugins-core (Docker's RHEL page: 'Install the dnf-plugins-core "
        "package (which provides the commands to manage your DNF repositories)')",
    ),
    "debian-slurm-plugins": Citation(
        "Debian package slurm-wlm-basic-plugins (bookworm), file lists; Ubuntu alike",
        "https://packages.debian.org/bookworm/amd64/slurm-wlm-basic-plugins/filelist ; "
        "https://packages.debian.org/bookworm/arm64/slurm-wlm-basic-plugins-dev/filelist ; "
        "https://packages.ubuntu.com/noble/s390x/slurm-wlm-basic-plugins/filelist",
        "'File list of package slurm-wlm-basic-plugins in bookworm of architecture amd64': "
        "'/usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_slurmdbd.so', '.../slurm-wlm/auth_munge.so' ...; "
        "arm64: '/usr/lib/aarch64-linux-gnu/slurm-wlm/...'; Ubuntu noble: '/usr/lib/s390x-linux-gnu/slurm-wlm/...' "
        "(the plugin directory is /usr/lib/<GNU triplet>/slurm-wlm)",
    ),
    "epel-slurm-plugins": Citation(
        "SchedMD/slurm slurm.spec (the RPM layout EPEL's and SchedMD's packages share)",
        "github.com/SchedMD/slurm slurm.spec",
        "'%dir %{_libdir}/slurm', '%{_libdir}/slurm/*.so' (plugins under %{_libdir}/slurm); on EL x86_64 that is "
        "/usr/lib64/slurm, as public build notes show: 'the file /usr/lib64/slurm/accounting_storage_mysql.so is "
        "missing' ... 'BUILDROOT/slurm-23.02.6-1.el8.x86_64/usr/lib64/slurm/...'",
    ),
    "ubuntu-cgroup-v2": Citation(
        "ubuntu-devel mailing list: systemd enabling cgroup v2 by default (default-hierarchy=unified), "
        "Lukas Märdian, 17 Aug 2021 (Ubuntu 21.10; 22.04 and 24.04 follow)",
        "https://lists.ubuntu.com/archives/ubuntu-devel/2021-August/041598.html",
        "'After delaying this for a long time, we want to follow upstream, Debian and others in switching to the "
        "\"unified\" cgroup hierarchy (cgroupv2) by default.' ... 'the next systemd upload will land this change "
        "(before FeatureFreeze)' ... 'If for some reason you need to keep the legacy cgroup v1 hierarchy, you can "
        "select it via a kernel parameter at boot time'",
    ),
    "deb-nfs": Citation(
        "Debian packages nfs-kernel-server and nfs-common (bookworm); geerlingguy/ansible-role-nfs "
        "tasks/setup-Debian.yml",
        "https://packages.debian.org/bookworm/nfs-kernel-server ; https://packages.debian.org/bookworm/nfs-common ; "
        "github.com/geerlingguy/ansible-role-nfs tasks/setup-Debian.yml",
        "nfs-kernel-server: 'support for NFS kernel server'; nfs-common: 'NFS support files common to client "
        "and server' (mount.nfs); the role: 'Ensure NFS utilities are installed.' apt: with_items: "
        "'nfs-common', 'nfs-kernel-server' (Ubuntu's archive carries the same two packages)",
    ),
    "el-nfs": Citation(
        "geerlingguy/ansible-role-nfs tasks/setup-RedHat.yml; RHEL 9 Configuring and using network file services",
        "github.com/geerlingguy/ansible-role-nfs tasks/setup-RedHat.yml ; https://docs.redhat.com/en/"
        "documentation/red_hat_enterprise_linux/9/html/configuring_and_using_network_file_services/",
        "'Ensure NFS utilities are installed.' 'package: name=nfs-utils state=present' (one package for server "
        "and client on RHEL and its rebuilds: 'dnf install nfs-utils', 'systemctl enable --now nfs-server')",
    ),
    "epel-node-exporter": Citation(
        "Fedora Packages: node-exporter; Fedora dist-git node-exporter.spec (as mirrored in "
        "github.com/major/fedora-rpm-specs, commit 3224913fa5e3d1091af796ee8a614b3795b8617b, Version 1.7.0)",
        "https://packages.fedoraproject.org/pkgs/node-exporter/node-exporter/ ; github.com/major/fedora-rpm-specs "
        "node-exporter.spec",
        "Releases Overview: 'Fedora EPEL 9 | 1.9.1-2.el9 | 1.10.2-3.el9'. The spec: 'Name: node-exporter', "
        "'%global shortname prometheus-node-exporter', 'Obsoletes: golang-github-prometheus-node-exporter < "
        "1.6.1-2', '# Replace defaults paths for config files / Patch: defaults-paths.patch'; installs "
        "'%{_unitdir}/%{shortname}.service' (with a node_exporter.service link) and '%config(noreplace) "
        "%{_sysconfdir}/default/%{shortname}'",
    ),
    "epel-prometheus": Citation(
        "Fedora Packages: golang-github-prometheus; Fedora dist-git golang-github-prometheus.spec (as mirrored "
        "in github.com/major/fedora-rpm-specs, commit 17751b455957fcf0f485364567de599a3b6be7a1, Version 2.32.1)",
        "https://packages.fedoraproject.org/pkgs/golang-github-prometheus/golang-github-prometheus/ ; "
        "github.com/major/fedora-rpm-specs golang-github-prometheus.spec",
        "'Prometheus monitoring system and time series database': 'EPEL 9 | 2.32.1-3.el9'. The spec: 'Name: "
        "%{goname}' (golang-github-prometheus), '%global shortname prometheus', '# Debian patch for default "
        "settings / Patch0: defaults-paths.patch'; installs '%{_unitdir}/prometheus.service', "
        "'%{_sysconfdir}/default/%{shortname}' and '%config(noreplace) %{_sysconfdir}/prometheus/prometheus.yml'",
    ),
    "epel-alertmanager": Citation(
        "Fedora Packages: golang-github-prometheus-alertmanager; Fedora dist-git "
        "golang-github-prometheus-alertmanager.spec (as mirrored in github.com/major/fedora-rpm-specs, commit "
        "17751b455957fcf0f485364567de599a3b6be7a1, Version 0.23.0)",
        "https://packages.fedoraproject.org/pkgs/golang-github-prometheus-alertmanager/"
        "golang-github-prometheus-alertmanager ; github.com/major/fedora-rpm-specs "
        "golang-github-prometheus-alertmanager.spec",
        "Releases Overview: 'Fedora EPEL 9 | 0.23.0-6.el9'. The spec: 'Name: %{goname}', '%global shortname "
        "prometheus-alertmanager', '# Replace defaults paths for config files'; installs "
        "'%{_unitdir}/%{shortname}.service', '%config(noreplace) %{_sysconfdir}/prometheus/alertmanager.yml' and "
        "'%config(noreplace) %{_sysconfdir}/default/%{shortname}'",
    ),
    # --- per-architecture names outside the table (see OUTSIDE_ROWS) ----------------------------
    "container-toolkit-arch": Citation(
        "NVIDIA/libnvidia-container gh-pages (the NVIDIA Container Toolkit repositories)",
        f"github.com/NVIDIA/libnvidia-container stable/deb/nvidia-container-toolkit.list, "
        f"stable/rpm/nvidia-container-toolkit.repo ({LIBNVIDIA_CONTAINER}/stable/...)",
        "list: 'deb https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /' (apt substitutes dpkg's "
        "architecture); repo: 'baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch'. "
        "Both architectures are published: stable/deb/amd64/ and stable/deb/arm64/Packages; "
        "stable/rpm/x86_64/ and stable/rpm/aarch64/ (libnvidia-container-tools-1.20.1-1.aarch64.rpm ...)",
    ),
    "helm-arch": Citation(
        "helm/helm scripts/get-helm-3 (the installer helm's docs link)",
        "github.com/helm/helm scripts/get-helm-3",
        "initArch: 'aarch64) ARCH=\"arm64\";;', 'x86_64) ARCH=\"amd64\";;'; verifySupported lists "
        "'linux-amd64' and 'linux-arm64'; downloadFile: 'HELM_DIST=\"helm-$TAG-$OS-$ARCH.tar.gz\"', "
        "'DOWNLOAD_URL=\"https://get.helm.sh/$HELM_DIST\"', checksum '$DOWNLOAD_URL.sha256'; the archive holds "
        "'$OS-$ARCH/helm' (helm-v<ver>-linux-arm64.tar.gz -> linux-arm64/helm)",
    ),
    "enroot-arch": Citation(
        "NVIDIA/enroot doc/installation.md (v3.5.0 and master), pkg/release/deb-build.sh, rpm-build.sh; "
        "NVIDIA/enroot issue 121",
        "github.com/NVIDIA/enroot doc/installation.md ; https://github.com/NVIDIA/enroot/issues/121",
        "Debian-based: 'arch=$(dpkg --print-architecture)', '.../releases/download/v3.5.0/"
        "enroot_3.5.0-1_${arch}.deb', 'enroot+caps_3.5.0-1_${arch}.deb'; RHEL-based: 'arch=$(uname -m)', "
        "'enroot-3.5.0-1.el8.${arch}.rpm', 'enroot+caps-3.5.0-1.el8.${arch}.rpm' (el8 builds on EL9 too). "
        "Release builds: '# aarch64 enroot package' in deb-build.sh and rpm-build.sh. Issue 121 (maintainer): "
        "'https://github.com/NVIDIA/enroot/releases/download/v3.4.0/enroot_3.4.0-1_arm64.deb ... If you follow "
        "the install instructions it should just work'",
    ),
    "mig-manager-arch": Citation(
        "NVIDIA/mig-parted deployments/systemd/packages/Makefile, .github/workflows/build.yaml; NVIDIA/deepops "
        "pull request 1399; NVIDIA/mig-parted issue 30",
        "github.com/NVIDIA/mig-parted deployments/systemd/packages/Makefile ; "
        "https://github.com/NVIDIA/deepops/pull/1399 ; https://github.com/NVIDIA/mig-parted/issues/30",
        "Makefile: 'TARGETS = tarball deb rpm', 'AMD64_TARGETS', 'ARM64_TARGETS' ('ARCH = amd64' / 'ARCH = "
        "arm64'); build.yaml matrix arch includes arm64. deepops 1399 (merged, 2026): 'the .deb uses Debian "
        "names and the .rpm uses kernel names': x86_64 -> amd64 / x86_64, aarch64 -> arm64 / aarch64; 'v0.14.2 "
        "publishes only x86_64 and aarch64 (.deb, .rpm, .tar.gz for each)': nvidia-mig-manager_<v>-1_arm64.deb, "
        "nvidia-mig-manager-<v>-1.aarch64.rpm. Issue 30 (2023): no prebuilt ARM packages then ('should be able "
        "to provide ARM packages following' the #42 rework) - older releases are x86_64 only",
    ),
    "docker-rhel-arch": Citation(
        "Docker documentation: Install Docker Engine (supported platforms); Install Docker Engine on RHEL",
        "docker/docs content/manuals/engine/install/_index.md, rhel.md (https://docs.docker.com/engine/install/)",
        "Platform table: 'RHEL | x86_64 / amd64: yes | arm64 / aarch64: yes | s390x: yes'; rhel.md: 'Docker "
        "Engine requires a maintained version of RHEL: RHEL 8, RHEL 9'; 'dnf config-manager --add-repo "
        "https://download.docker.com/linux/rhel/docker-ce.repo'; install from a package: 'Select the "
        "applicable architecture (x86_64, aarch64, or s390x), and then go to stable/Packages/'",
    ),
    "docker-el-rebuilds": Citation(
        "Docker documentation: Other Linux distributions; Rocky Linux documentation: Docker - Install Engine; "
        "docker/docker-install install.sh",
        "docker/docs content/manuals/engine/install/_index.md ; github.com/rocky-linux/documentation "
        "docs/gemstones/containers/docker.md ; github.com/docker/docker-install install.sh (commit 86f94af)",
        "Docker lists no Rocky or AlmaLinux page: 'While the following instructions may work, Docker doesn't test "
        "or verify installation on distribution derivatives'. Rocky's own guide: 'dnf config-manager --add-repo "
        "https://download.docker.com/linux/centos/docker-ce.repo' (Docker's CentOS repository, which the table "
        "marks x86_64 and arm64). Docker's convenience script, 'Prepare for Rocky Linux' (2026-03-30): "
        "'centos|fedora|rhel|rocky)' -> repo_file_url=\"$DOWNLOAD_URL/linux/$lsb_dist/$REPO_FILE\" "
        "(linux/rocky/docker-ce.repo); almalinux is not in that list. No upstream names the rhel repository "
        "for Rocky or AlmaLinux",
    ),
}

#: Keys no ``ArchNames``/``Distribution`` row names, with what reads them instead. Release-file and
#: repository names per architecture that are built from ``ArchNames`` fields by the renderers and
#: the bundle, not stored in the table.
OUTSIDE_ROWS: dict[str, str] = {
    "container-toolkit-arch": "the NVIDIA Container Toolkit apt/dnf sources (render/nvidia_sources.py): "
    "stable/deb/<ArchNames.deb>, stable/rpm/<ArchNames.rpm>",
    "helm-arch": "helm's release archive name (k8s_upstream.helm_tarball, ArchNames.go)",
    "enroot-arch": "enroot release file names (enroot layer, bundle): ArchNames.deb / ArchNames.rpm",
    "mig-manager-arch": "nvidia-mig-manager release packages (render/nvidia_sources.py, bundle): "
    "ArchNames.deb / ArchNames.rpm",
    "docker-rhel-arch": "Distribution.docker_repo_distro on RHEL 9 (download.docker.com/linux/rhel/<v>/<rpm arch>)",
}
