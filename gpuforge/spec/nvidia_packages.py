"""Upstream facts of the NVIDIA stack, per OS x source x driver branch x flavor: one data table.

Every fact names where it came from (``SOURCES``: page or file, and section). The deploy
layers, the plan, the offline bundle and the spec rules all read these functions; tests
check plans against them and against literal expectations written from the same sources.

Where sources disagree the row says which one is followed and why (see ``DISAGREEMENTS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.citation import Citation
from gpuforge.spec.model import DriverFlavor, DriverSource, OsFamily
from gpuforge.spec.platforms import Arch, Platform, platform_for

GUIDE = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide"

SOURCES: dict[str, Citation] = {
    "guide-flavors": Citation(
        "NVIDIA Driver Installation Guide",
        f"{GUIDE}/advanced-options.html",
        "Switching between Driver Module Flavors (Debian 12; Ubuntu 22.04/24.04): "
        "'apt install nvidia-open' / 'apt install cuda-drivers'; Ubuntu adds nvidia-driver-open / nvidia-driver",
    ),
    "guide-590-renames": Citation(
        "NVIDIA Driver Installation Guide",
        f"{GUIDE}/recent-updates.html",
        "Version locking packages for Ubuntu / Debian; Ubuntu 590 and later packages (Table 4): "
        "'Starting with branch 590, the Ubuntu packages will be renamed by removing the branch designation'; "
        "cuda-drivers-580 'will be removed'; nvidia-dkms-580 -> nvidia-dkms; "
        "nvidia-dkms-580-open -> nvidia-dkms-open; "
        "'we suggest to install the pinning package prior to installing the driver' (nvidia-driver-pinning-<branch>)",
    ),
    "guide-kernel-modules": Citation(
        "NVIDIA Driver Installation Guide (620)",
        f"{GUIDE}/620/kernel-modules.html",
        "Table 5, RHEL 8/9: 'dnf module enable nvidia-driver:580-open' then 'dnf install nvidia-open'",
    ),
    "guide-version-locking": Citation(
        "NVIDIA Driver Installation Guide",
        f"{GUIDE}/version-locking.html",
        "DNF 4: 'Make sure the python3-dnf-plugin-versionlock package is installed'; "
        "'dnf4 versionlock \\*nvidia\\*575\\*'",
    ),
    "guide-pre-install": Citation(
        "NVIDIA Driver Installation Guide",
        f"{GUIDE}/pre-installation-actions.html",
        "'The NVIDIA driver requires that the kernel headers and development packages for the running version "
        "of the kernel be installed at the time of the driver installation'",
    ),
    "guide-introduction": Citation(
        "NVIDIA Driver Installation Guide",
        f"{GUIDE}/introduction.html",
        "supported distributions: rhel9, ubuntu2204, ubuntu2404, debian12 (x86_64/amd64)",
    ),
    "cuda-dnf-streams": Citation(
        "NVIDIA/yum-packaging-precompiled-kmod, NVIDIA/yum-packaging-dkms-nvidia",
        "github.com/NVIDIA/yum-packaging-precompiled-kmod README.md; "
        "github.com/NVIDIA/yum-packaging-dkms-nvidia README.md",
        "streams 'XXX-dkms' lock to a branch; open streams 'available in 515 and newer: open-dkms and XXX-open'",
    ),
    "cuda-local-repo-ubuntu2204-550": Citation(
        "NVIDIA's driver repository for Ubuntu 22.04 at 550.54.15 (nvidia-driver-local-repo-ubuntu2204-550.54.15_"
        "1.0-1_amd64.deb, maintainer cudatools <cudatools@nvidia.com>), its file list as 'dpkg-deb -c' prints it in "
        "a public copy of NVIDIA's driver-container README (the repository's index is not stored)",
        "https://developer.download.nvidia.com/compute/nvidia-driver/550.54.15/local_installers/"
        "nvidia-driver-local-repo-ubuntu2204-550.54.15_1.0-1_amd64.deb",
        "'cuda-drivers-550_550.54.15-1_amd64.deb', 'nvidia-kernel-open-550_550.54.15-0ubuntu1_amd64.deb', "
        "'nvidia-driver-550-open_550.54.15-0ubuntu1_amd64.deb', 'nvidia-dkms-550-open_550.54.15-0ubuntu1_amd64.deb', "
        "'nvidia-kernel-source-550-open_...'; no 'nvidia-open' package among its 80 files",
    ),
    "cuda-downloads-open-550": Citation(
        "NVIDIA CUDA Toolkit 12.4 downloads page (Linux, Ubuntu, deb network), as public install scripts echo it",
        "https://developer.nvidia.com/cuda-12-4-0-download-archive?target_os=Linux&target_distro=Ubuntu",
        "'NVIDIA Kernel drivers (Choose one of the following options)'; 'To install the legacy kernel module "
        "flavor: sudo apt-get install -y cuda-drivers'; 'To install the open kernel module flavor: sudo apt-get "
        "install -y nvidia-kernel-open-550', 'sudo apt-get install -y cuda-drivers-550'",
    ),
    "guide-open-default-560": Citation(
        "NVIDIA Driver Installation Guide: Kernel Modules",
        f"{GUIDE}/kernel-modules.html",
        "'Starting in the 560 driver release series, the open kernel module flavor is the default and suggested "
        "installation'; the Ubuntu flavor metapackages nvidia-open / nvidia-driver-open of guide-flavors are those "
        "of that series and later",
    ),
    "nvidia-forum-cuda-drivers-580": Citation(
        "NVIDIA developer forums: Debian cuda-drivers-580 package 580.105.08-1 improperly pulls in v590 components",
        "https://forums.developer.nvidia.com/t/353805",
        "cuda-drivers-580 control: 'Depends: nvidia-driver (>= 580.65.06), nvidia-driver-cuda (>= 580.65.06), "
        "nvidia-kernel-dkms (>= 580.65.06)' (the branch metapackage alone does not hold the branch)",
    ),
    "debian-nvidia-open-kernel-dkms": Citation(
        "Debian package nvidia-open-kernel-dkms (bookworm, contrib)",
        "https://packages.debian.org/bookworm/nvidia-open-kernel-dkms",
        "'nvidia-open-kernel-dkms (535.247.01-1~deb12u1) [contrib]' ... 'dep: firmware-nvidia-gsp (= 535.247.01)'",
    ),
    "canonical-nvidia-drivers": Citation(
        "Ubuntu Server documentation: NVIDIA drivers installation",
        "github.com/canonical/ubuntu-server-documentation docs/how-to/graphics/install-nvidia-drivers.md",
        "ERD packages carry the -server suffix; 'sudo apt install nvidia-fabricmanager-535 libnvidia-nscq-535' "
        "'will match the nvidia-driver-535-server package version'; DKMS modules are not signed for Secure Boot",
    ),
    "ansible-role-nvidia-driver": Citation(
        "NVIDIA/ansible-role-nvidia-driver v2.3.1 (the version DeepOps pins)",
        "github.com/NVIDIA/ansible-role-nvidia-driver defaults/main.yml L30-46, tasks/install-redhat.yml L9-50",
        "nvidia-headless-<b>-server, nvidia-utils-<b>-server (Canonical); cuda-drivers-<b> (CUDA repo); "
        "RHEL: epel-release-latest-<major>.noarch.rpm, dkms, kernel-headers-/kernel-devel-<running kernel>",
    ),
    "deepops-ubuntu-open": Citation(
        "NVIDIA/deepops",
        "github.com/NVIDIA/deepops playbooks/nvidia-software/tasks/nvidia-driver-ubuntu-packages.yml",
        "open modules: nvidia-headless-<b>-server-open (Canonical archive)",
    ),
    "cns-fabricmanager": Citation(
        "NVIDIA/cloud-native-stack",
        "github.com/NVIDIA/cloud-native-stack playbooks/nvidia-driver.yaml L392-443",
        "'driver_version | int <= 570' -> nvidia-fabricmanager-<b>=<ver>-1; '>= 580' -> nvidia-fabricmanager=<ver>-1; "
        "service nvidia-fabricmanager; Ubuntu: linux-headers-<kernel>, build-essential, dkms (L245-248)",
    ),
    "nscq-cuda-repo": Citation(
        "NVIDIA CUDA repositories, file names as public installers download them (no listing is stored); "
        "Azure/azhpc-images components/install_nvidia_fabric_manager.sh",
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
        "libnvidia-nscq_580.105.08-1_amd64.deb; "
        "apt 'nvidia-fabricmanager-570=570.133.20-1 libnvidia-nscq-570=570.133.20-1'; amzn2023 CUDA repository "
        "package lists 'libnvidia-nscq-570-570.211.01-1', 'libnvidia-nscq-580.126.09-1'",
        "NSCQ (the NVSwitch library DCGM reads NVSwitch telemetry with) ships beside the fabric manager at the "
        "driver's version: 'libnvidia-nscq-<branch>' below 580, 'libnvidia-nscq' from 580 (deb and rpm alike); "
        "azhpc-images: 'The NVIDIA CUDA repo ... ships nvidia-fabricmanager and libnvidia-nscq packages'",
    ),
    "azhpc-fabricmanager": Citation(
        "Azure/azhpc-images (Microsoft's HPC images)",
        "github.com/Azure/azhpc-images components/install_nvidia_fabric_manager.sh L14-51",
        "'For NVIDIA Fabric Manager major version 580, Nvidia dropped the hyphen between fabric and manager' (RHEL)",
    ),
    "deepops-rhel-crb": Citation(
        "NVIDIA/deepops",
        "github.com/NVIDIA/deepops roles/nvidia-dgx/vars/redhat.yml; playbooks .../redhat-el8-plus.yml L24-48",
        "codeready-builder-for-rhel-9-x86_64-rpms (subscription-manager); 'dnf config-manager --set-enabled crb'",
    ),
    "cns-secure-boot": Citation(
        "NVIDIA/cloud-native-stack",
        "github.com/NVIDIA/cloud-native-stack README.md L106; playbooks/cns-installation.yaml L483-486",
        "'UEFI secure boot is disabled' (preflight: mokutil --sb-state)",
    ),
    "dcgm-install": Citation(
        "NVIDIA DCGM documentation: Install DCGM",
        "https://docs.nvidia.com/datacenter/dcgm/latest/installation.html",
        "CUDA_VERSION=$(nvidia-smi | sed -E -n 's/.*CUDA Version: ([0-9]+)[.].*/\\1/p'); "
        "'apt-get install --yes --install-recommends datacenter-gpu-manager-4-cuda${CUDA_VERSION}'; "
        "dnf: '--setopt=install_weak_deps=True datacenter-gpu-manager-4-cuda${CUDA_VERSION}'",
    ),
    "azhpc-dcgm": Citation(
        "Azure/azhpc-images",
        "github.com/Azure/azhpc-images components/install_dcgm.sh",
        "pinned without recommends: datacenter-gpu-manager-4-cuda<N>, -4-core, -4-proprietary, "
        "-4-proprietary-cuda<N> (all =<DCGM version>); N is the CUDA major nvidia-smi reports",
    ),
    "cuda-driver-versions": Citation(
        "NVIDIA CUDA Toolkit Release Notes",
        "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
        "Table 'CUDA Toolkit and Corresponding Driver Versions': CUDA 12.2 GA >= 535.54.03, 12.4 GA >= 550.54.14, "
        "12.8 GA >= 570.26, 13.0 GA >= 580.65.06 (a branch's driver reports the CUDA major of its toolkit)",
    ),
    "dcgm-exporter-versioning": Citation(
        "NVIDIA/dcgm-exporter",
        "github.com/NVIDIA/dcgm-exporter README.md (tags such as 4.2.3-4.1.3; Makefile NEW_DCGM_VERSION)",
        "release tags are '<DCGM version>-<exporter version>': the exporter is built against that DCGM",
    ),
    "dcgm-cuda13-packaging": Citation(
        "NVIDIA/DCGM (the open-source tree of each DCGM release)",
        "github.com/NVIDIA/DCGM cmake/packaging.cmake at tags v4.0.0, v4.3.1 and v4.4.1",
        "v4.0.0 to v4.3.1 name only CPACK_DEBIAN_CUDA11_PACKAGE_NAME / CUDA12 ('${CPACK_PACKAGE_NAME}-cuda11', "
        "'-cuda12'); "
        "v4.4.1 adds 'set(CPACK_DEBIAN_CUDA13_PACKAGE_NAME \"${CPACK_PACKAGE_NAME}-cuda13\")' and "
        "CPACK_RPM_CUDA13_PACKAGE_NAME, 'binaries supporting CUDA13 environments' (4.4.0 was not tagged there)",
    ),
    "dcgm-4.4-cuda13": Citation(
        "NVIDIA/DCGM pull request #249 'DCGM 4.3.1'; NVIDIA/dcgm-exporter release 4.4.0-4.5.0 (pull request #545)",
        "github.com/NVIDIA/DCGM/pull/249 (comment, 2025-08-16); "
        "github.com/NVIDIA/dcgm-exporter/releases/tag/4.4.0-4.5.0, hack/VERSION at that tag",
        "'DCGM 4.3.1 does not provide full CUDA 13 support. DCGM 4.4.0 will be open-sourced right after'; "
        "4.4.0-4.5.0: 'Update to DCGM 4.4 and Cuda 13.0' (NEW_DCGM_VERSION=4.4.0, OLD_DCGM_VERSION=4.3.1): "
        "DCGM 4.4.0 is the first release with the CUDA 13 packages",
    ),
    "dcgm-exporter-4.6.0-4.8.3": Citation(
        "NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/values.yaml (commit 10ee5b36); NVIDIA/dcgm-exporter "
        "README.md",
        "github.com/NVIDIA/gpu-operator/blob/v26.7.0/deployments/gpu-operator/values.yaml ; "
        "github.com/NVIDIA/dcgm-exporter README.md 'Quickstart'",
        "dcgm: 'version: 4.6.0-1-ubuntu24.04'; dcgmExporter: 'version: 4.6.0-4.8.3-distroless' (the exporter "
        "4.8.3 built against DCGM 4.6.0); the README: 'docker run ... nvcr.io/nvidia/k8s/dcgm-exporter:"
        "4.6.0-4.8.3-distroless'. The tag itself is newer than gpuforge's dcgm-exporter snapshot (newest tag "
        "4.5.3-4.8.2, 2026-05-12)",
    ),
    "dcgm-exporter-4.4.2-4.7.1": Citation(
        "NVIDIA/dcgm-exporter tag 4.4.2-4.7.1; NVIDIA/gpu-operator pull request #1926",
        "github.com/NVIDIA/dcgm-exporter hack/VERSION at tag 4.4.2-4.7.1 ('Update version to 4.4.2-4.7.1 (#597)'); "
        "github.com/NVIDIA/gpu-operator/pull/1926; github.com/NVIDIA/DCGM tag v4.4.2",
        "NEW_DCGM_VERSION=4.4.2 NEW_EXPORTER_VERSION=4.7.1 (the exporter built against DCGM 4.4.2); the GPU "
        "Operator's 'bump dcgm & dcgm-exporter to versions 4.4.2 and 4.4.2-4.7.0'",
    ),
    "mig-parted-releases": Citation(
        "NVIDIA/mig-parted",
        "github.com/NVIDIA/mig-parted deployments/systemd/packages/Makefile, .github/workflows/build.yaml; "
        "release assets as used by stackhpc/kayobe docs (vgpu) and NVIDIA's own demo scripts",
        "packages deb/rpm/tarball are built by the project, not published in the CUDA repository: "
        "releases/download/v<v>/nvidia-mig-manager_<v>-1_amd64.deb and nvidia-mig-manager-<v>-1.x86_64.rpm",
    ),
    "mig-parted-cdi-refresh": Citation(
        "NVIDIA/mig-parted v0.15.0 (commit e2d5ad1fc72b9d298ea6d04b885cf2d7dbe56941)",
        "github.com/NVIDIA/mig-parted deployments/systemd/hooks.sh L137-147; CHANGELOG.md",
        "hooks.sh: 'refresh-cdi triggers the nvidia-cdi-refresh service to regenerate CDI specifications': "
        "'function refresh-cdi()' runs 'systemctl restart nvidia-cdi-refresh.service' when 'systemctl "
        "list-unit-files nvidia-cdi-refresh.service' finds it; CHANGELOG v0.14.0: 'Extend the functionality of "
        "apply-exit to refresh CDI config' (no deployments/systemd/cdi-refresh.sh exists at any tag)",
    ),
    "mig-parted-v0.15.0": Citation(
        "NVIDIA/mig-parted v0.15.0 (2026-08-19); NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/values.yaml",
        "github.com/NVIDIA/mig-parted CHANGELOG.md, .github/workflows/build.yaml, "
        "deployments/systemd/packages/Makefile",
        "the newest tag (the GPU Operator v26.7.0 pins k8s-mig-manager 'version: v0.15.0'); CHANGELOG v0.14.3 "
        "'Start driver services non-blocking during boot to avoid deadlock', v0.14.4 'Start hook-managed systemd "
        "services with --no-block to avoid deadlocks', v0.14.5 'Skip container runtime calls in hooks to avoid "
        "deadlocks'; the packages job builds deb, rpm and tarball for 'amd64' and 'arm64' (ARCH = amd64 / arm64)",
    ),
    "dcgm-exporter-install": Citation(
        "NVIDIA DCGM documentation: Install DCGM Exporter",
        "https://docs.nvidia.com/datacenter/dcgm/latest/installation/install-dcgm-exporter.html",
        "'DCGM Exporter can run as a package-managed systemd service, an OCI container, or a Kubernetes "
        "DaemonSet'; 'RPM and Debian package versions identify the exporter version; dcgm-exporter --version "
        "reports the paired DCGM and exporter versions'; 'Run DCGM Exporter with the DCGM version paired with that "
        "exporter release'",
    ),
    "dcgm-exporter-unit": Citation(
        "NVIDIA/dcgm-exporter (commit d5e5f510a1b6, 2026-05-12)",
        "github.com/NVIDIA/dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service",
        "'Wants=nvidia-dcgm.service', 'ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv' "
        "(the packaged unit: gpuforge keeps it stopped and runs its own unit with the spec's counters and port)",
    ),
    "dcgm-exporter-repo-files": Citation(
        "NVIDIA CUDA repositories, file names as copied by public installers (no listing of the repository itself "
        "is stored)",
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/{x86_64,sbsa}/"
        "datacenter-gpu-manager-exporter-4.5.0-1.{x86_64,aarch64}.rpm; "
        "datacenter-gpu-manager-exporter_4.8.2-1_amd64.deb (ubuntu2404/x86_64)",
        "package 'datacenter-gpu-manager-exporter', version '<exporter version>-1' (4.5.0-1, 4.8.2-1): the exporter "
        "half of a '<DCGM>-<exporter>' release tag; x86_64 and aarch64 builds",
    ),
    "gpu-operator-upgrade": Citation(
        "NVIDIA/cloud-native-docs gpu-operator/upgrade.rst (commit 187a4a5bdc9d6ca222ee59cde894bad4ab20eec0)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/upgrade.html",
        "Option 2, Automatically Upgrading CRDs Using a Helm Hook: 'Starting with GPU Operator v24.9.0, the "
        "upgrade CRD Helm hook is enabled by default'; 'helm upgrade gpu-operator nvidia/gpu-operator -n "
        "gpu-operator --disable-openapi-validation -f values-$RELEASE_TAG.yaml --version $RELEASE_TAG'; 'Option "
        "--disable-openapi-validation is required in this case so that Helm will not try to validate if CR "
        "instance from the new chart is valid as per old CRD'",
    ),
    "gpu-operator-host-toolkit": Citation(
        "NVIDIA/cloud-native-docs gpu-operator/getting-started.rst (commit 187a4a5bdc9d6ca222ee59cde894bad4ab20eec0)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html",
        "Pre-Installed NVIDIA Container Toolkit (but no drivers): 'Configure toolkit to use the root directory of "
        "the driver installation as /run/nvidia/driver, because this is the path mounted by driver container': "
        "'sudo sed -i 's/^#root/root/' /etc/nvidia-container-runtime/config.toml'; then '--set "
        "toolkit.enabled=false'",
    ),
    "ctk-comment-defaults": Citation(
        "NVIDIA/nvidia-container-toolkit v1.17.8 (commit f202b80a9b9d0db00d9b1d73c0128c8962c55f4d) and v1.20.0 "
        "(commit 5505e2f94d9aaa08561490db974ba3cd676af209)",
        "github.com/NVIDIA/nvidia-container-toolkit internal/config/toml.go commentDefaults, shouldComment; "
        "internal/config/toml_test.go (v1.20.0: api/config/v1/toml.go, the same code)",
        "the default config carries '#root = \"/run/nvidia/driver\"' under [nvidia-container-cli]; on every save "
        "(nvidia-ctk config --in-place) a key set to its commented default ('nvidia-container-cli.root': "
        "'/run/nvidia/driver') is written commented out again ('if setTo == nil || defaultValue == setTo'), so "
        "'nvidia-ctk config --set nvidia-container-cli.root=/run/nvidia/driver' cannot set it: gpuforge edits the "
        "line as the operator's docs do, after any nvidia-ctk config run",
    ),
    "docker-rhel": Citation(
        "Docker documentation: Install Docker Engine on RHEL",
        "https://docs.docker.com/engine/install/rhel/",
        "'dnf config-manager --add-repo https://download.docker.com/linux/rhel/docker-ce.repo'; "
        "'dnf install docker-ce docker-ce-cli containerd.io ...'; the repo file: [docker-ce-stable] "
        "baseurl=https://download.docker.com/linux/rhel/$releasever/$basearch/stable gpgcheck=1 "
        "gpgkey=https://download.docker.com/linux/rhel/gpg",
    ),
    "container-toolkit-repo": Citation(
        "NVIDIA/libnvidia-container (gh-pages)",
        "github.com/NVIDIA/libnvidia-container stable/rpm/nvidia-container-toolkit.repo",
        "[nvidia-container-toolkit] baseurl=.../stable/rpm/$basearch repo_gpgcheck=1 gpgcheck=0 enabled=1 "
        "gpgkey=https://nvidia.github.io/libnvidia-container/gpgkey (the metadata is signed, the packages are not)",
    ),
    "cuda-rpm-repo": Citation(
        "NVIDIA CUDA repositories (RHEL), the .repo file beside each repository",
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo (rhel9 alike); "
        "NVIDIA/yum-packaging-precompiled-kmod README 'Sign RPM packages', 'Generate metadata'",
        "[cuda-rhel8-x86_64] baseurl=.../rhel8/x86_64 enabled=1 gpgcheck=1 gpgkey=.../D42D0685.pub (packages "
        "signed with 'rpm --addsign', metadata from 'createrepo_c' and 'modifyrepo_c modules.yaml', not signed)",
    ),
    "epel-repo": Citation(
        "Fedora EPEL: epel-release's /etc/yum.repos.d/epel.repo",
        "https://dl.fedoraproject.org/pub/epel/ (epel-release-latest-9.noarch.rpm, RPM-GPG-KEY-EPEL-9)",
        "[epel] #baseurl=https://download.example/pub/epel/$releasever/Everything/$basearch/ "
        "metalink=https://mirrors.fedoraproject.org/metalink?repo=epel-$releasever&arch=$basearch... "
        "gpgcheck=1 gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-$releasever (signed packages)",
    ),
    "cuda-repo-key": Citation(
        "NVIDIA CUDA repositories (Debian/Ubuntu), the key beside each repository",
        "https://developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64/3bf863cc.pub",
        "the flat repositories publish a signed InRelease (apt on ubuntu1804/x86_64: 'NO_PUBKEY A4B469963BF863CC'; "
        "debian12/x86_64/InRelease: 'Policy will reject signature within a year'); key 3bf863cc.pub, primary "
        "fingerprint EB693B3035CD5710E231E123A4B469963BF863CC as pinned by public installers next to that URL; "
        "cuda-keyring ships the same key as /usr/share/keyrings/cuda-archive-keyring.gpg",
    ),
    "container-repo-key": Citation(
        "NVIDIA Container Toolkit install guide; NVIDIA/libnvidia-container gh-pages",
        "https://nvidia.github.io/libnvidia-container/gpgkey",
        "'curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o "
        "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg'; stable/deb/amd64 has a signed InRelease "
        "(apt: 'stable/deb/amd64 InRelease ... NO_PUBKEY DDCAE044F796ECB0'); primary fingerprint "
        "C95B321B61E88C1809C4F759DDCAE044F796ECB0 (pinned by public installers and Puppet apt::key resources)",
    ),
    "cuda-rpm-key": Citation(
        "NVIDIA/cuda-repo-management SIGNATURES.md (commit ee8303dff360b1523307eb18c45a6a5b987512ce)",
        "https://github.com/NVIDIA/cuda-repo-management/blob/ee8303dff360b1523307eb18c45a6a5b987512ce/SIGNATURES.md",
        "RPM repo method 2: dnf importing https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/"
        "D42D0685.pub, 'Userid : \"cudatools <cudatools@nvidia.com>\"', 'Fingerprint: 610C 7B14 E068 A878 070D "
        "A4E9 9CD0 A493 D42D 0685' (the same primary key fingerprint gpg prints for repodata/repomd.xml.key); the "
        "Debian repo method 1 prints 'Primary key fingerprint: EB69 3B30 35CD 5710 E231 E123 A4B4 6996 3BF8 63CC' "
        "for 3bf863cc.pub (cuda-repo-key)",
    ),
    "docker-rhel-key": Citation(
        "Docker documentation: Install Docker Engine on RHEL (docker/docs content/manuals/engine/install/rhel.md, "
        "commit 02d940447f8d3b5ee862773973c72194eb236d4e)",
        "https://docs.docker.com/engine/install/rhel/",
        "Install Docker Engine: 'If prompted to accept the GPG key, verify that the fingerprint matches "
        "060A 61C5 1B55 8A7F 742B 77AA C52F EB6B 621E 9F35, and if so, accept it.' (the key of "
        "gpgkey=https://download.docker.com/linux/rhel/gpg, docker-rhel)",
    ),
    "epel9-key": Citation(
        "rpm-software-management/distribution-gpg-keys keys/epel/RPM-GPG-KEY-EPEL-9 "
        "(commit 65c3eae56c18c09e3033ea71235c86f49e9fd9c7)",
        "https://github.com/rpm-software-management/distribution-gpg-keys/blob/"
        "65c3eae56c18c09e3033ea71235c86f49e9fd9c7/keys/epel/RPM-GPG-KEY-EPEL-9",
        "'gpg --show-keys' of the file: one primary key, 'Fedora (epel9) <epel@fedoraproject.org>', fingerprint "
        "FF8AD1344597106ECE813B918A3872BF3228467C (key ID 3228467C, the key epel-release installs as "
        "/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9: epel-repo)",
    ),
}

#: Where sources disagree, which one gpuforge follows and why.
DISAGREEMENTS: dict[str, str] = {
    "rhel-fabric-manager": (
        "cloud-native-stack installs nvidia-fabric-manager on RHEL for every branch; Azure/azhpc-images says the "
        "hyphen was dropped from 580. gpuforge follows azhpc-images: it states the change and its date, and it "
        "matches the Ubuntu/Debian rename at 580 that cloud-native-stack itself makes"
    ),
    "apt-pinning": (
        "NVIDIA's nvidia-driver-pinning-<branch> packages hold a branch; gpuforge also writes an apt preference "
        "for the exact version (stricter) and installs the pinning package from 590, where NVIDIA makes branch "
        "tracking opt-in"
    ),
}


@dataclass(frozen=True)
class DriverInstall:
    """How one OS installs one driver branch and flavor from one source (packages are apt or dnf names).

    ``packages`` are installed together (deb: held at the pin by apt preferences; rpm: at
    ``-<version>``); ``version_package`` is the one whose installed version must be the pin;
    ``fabric_manager`` is what NVSwitch systems add; ``prerequisites`` come first (kernel
    headers of the running kernel, DKMS); ``dnf_stream`` is the RHEL module stream enabled
    first; ``needs_epel`` says the prerequisites come from EPEL (RHEL's DKMS).
    """

    os: OsFamily
    source: DriverSource
    branch: int
    flavor: DriverFlavor
    packages: tuple[str, ...]
    version_package: str
    fabric_manager: tuple[str, ...]
    prerequisites: tuple[str, ...]
    repository: str
    cites: tuple[str, ...]
    dnf_stream: str | None = None
    needs_epel: bool = False
    pinning_package: str | None = None


#: From this branch the Ubuntu CUDA-repository packages lose the branch in their names.
UNVERSIONED_NAMES_FROM = 590
#: From this branch NVIDIA's Ubuntu repositories name the open flavor ``nvidia-open`` (guide-open-default-560);
#: below it the branch's own open packages (cuda-local-repo-ubuntu2204-550).
OPEN_METAPACKAGE_FROM = 560
#: From this branch the fabric manager package of NVIDIA's repositories is unversioned.
FABRIC_MANAGER_UNVERSIONED_FROM = 580

KERNEL_HEADERS = "{kernel_headers}"
"""Stands for the running kernel's headers package; ``driver_install`` fills it in."""


def _fabric_manager(os: OsFamily, source: DriverSource, branch: int) -> tuple[str, ...]:
    """The fabric manager and its NSCQ library (nscq-cuda-repo, canonical-nvidia-drivers)."""
    if source is DriverSource.DISTRO and os.distribution.distro_driver == "ubuntu-archive":
        return (f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}")  # canonical-nvidia-drivers
    unversioned = branch >= FABRIC_MANAGER_UNVERSIONED_FROM
    nscq = "libnvidia-nscq" if unversioned else f"libnvidia-nscq-{branch}"
    if os.is_rpm:  # azhpc-fabricmanager (see DISAGREEMENTS)
        return ("nvidia-fabricmanager" if unversioned else "nvidia-fabric-manager", nscq)
    return ("nvidia-fabricmanager" if unversioned else f"nvidia-fabricmanager-{branch}", nscq)


def kernel_headers_package(os: OsFamily, kernel_release: str | None, arch: Arch = Arch.X86_64) -> str:
    """The headers of the running kernel (or the platform's default flavor when unknown)."""
    if kernel_release is None:
        return platform_for(os, arch).headers_package
    return f"kernel-devel-{kernel_release}" if os.is_rpm else f"linux-headers-{kernel_release}"


class UnsupportedDriver(ValueError):
    """NVIDIA (or the distribution) ships no such driver; the message says what to use instead."""


def driver_install(
    os: OsFamily,
    source: DriverSource,
    branch: int,
    flavor: DriverFlavor,
    kernel_release: str | None = None,
    arch: Arch = Arch.X86_64,
) -> DriverInstall:
    """The row of the table for one combination; ``UnsupportedDriver`` when nobody ships it."""
    fm = _fabric_manager(os, source, branch)
    is_open = flavor is DriverFlavor.OPEN
    if os.distribution.distro_driver == "debian-nonfree" and source is DriverSource.DISTRO:
        return _debian_archive_driver(os, source, branch, flavor, fm, arch)
    if source is DriverSource.NVIDIA and os.distribution.cuda_repo_refused:
        raise UnsupportedDriver(f"{os.distribution.title}: {os.distribution.cuda_repo_refused}")
    headers = kernel_headers_package(os, kernel_release, arch)
    if os.is_rpm:
        return _rpm_driver(os, source, branch, flavor, fm, headers)
    # The running kernel's headers and dkms are named; the compilers come with dkms as hard
    # dependencies, which --no-install-recommends keeps (Debian 12's dkms 3.0.10: "Depends: kmod,
    # gcc | c-compiler, dpkg-dev, make | build-essential, patch"; the headers are only its Recommends,
    # hence named). Not build-essential itself: a package added to this layer restarts its services
    # (persistenced, the fabric manager) on nodes that already run.
    prereq = (headers, "dkms")
    pinning = f"nvidia-driver-pinning-{branch}" if branch >= UNVERSIONED_NAMES_FROM else None
    if source is DriverSource.DISTRO:  # Ubuntu: Canonical's archive (ERD "-server" packages)
        suffix = "-server-open" if is_open else "-server"
        return DriverInstall(
            os, source, branch, flavor, (f"nvidia-headless-{branch}{suffix}", f"nvidia-utils-{branch}-server"),
            f"nvidia-headless-{branch}{suffix}", fm, prereq, "ubuntu-archive",
            ("canonical-nvidia-drivers", "ansible-role-nvidia-driver", "deepops-ubuntu-open"),
        )  # fmt: skip
    if os.distribution.distro_driver == "debian-nonfree":  # NVIDIA's CUDA repository uses Debian's names
        module = "nvidia-kernel-open-dkms" if is_open else "nvidia-kernel-dkms"
        meta = "nvidia-open" if is_open else "cuda-drivers"
        return DriverInstall(
            os, source, branch, flavor, (meta, module), module, fm, prereq, "nvidia-cuda",
            ("guide-flavors", "nvidia-forum-cuda-drivers-580", "guide-590-renames", "cns-fabricmanager"),
            pinning_package=pinning,
        )  # fmt: skip
    return _ubuntu_cuda_driver(os, source, branch, flavor, fm, prereq, pinning)


def _debian_archive_driver(
    os: OsFamily, source: DriverSource, branch: int, flavor: DriverFlavor, fm: tuple[str, ...], arch: Arch
) -> DriverInstall:
    """Debian's own archive (non-free, contrib): one branch only (``Distribution.archive_driver_branch``)."""
    dist = os.distribution
    if branch != dist.archive_driver_branch:
        other = (
            "set versions.driver.source: nvidia (NVIDIA's CUDA repository)"
            if not dist.cuda_repo_refused
            else f"NVIDIA's repository is not used there either ({dist.cuda_repo_refused})"
        )
        raise UnsupportedDriver(
            f"{dist.title.split(' (')[0]}'s archive ships only driver branch {dist.archive_driver_branch}; "
            f"for {branch} {other}"
        )
    if flavor is DriverFlavor.OPEN:  # contrib: the open module package, its GSP firmware, the compute libraries
        packages: tuple[str, ...] = (
            "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "libcuda1", "firmware-nvidia-gsp",
        )  # fmt: skip
    else:  # the lab-tested set: the metapackage pulls nvidia-kernel-dkms; the GSP firmware is a Recommends
        packages = ("nvidia-driver", "nvidia-smi", "nvidia-persistenced", "firmware-nvidia-gsp")
    return DriverInstall(
        os, source, branch, flavor, (*packages, kernel_headers_package(os, None, arch)), packages[0], fm, (),
        "debian-nonfree", ("debian-nvidia-open-kernel-dkms", "guide-pre-install"),
    )  # fmt: skip


def _rpm_driver(
    os: OsFamily, source: DriverSource, branch: int, flavor: DriverFlavor, fm: tuple[str, ...], headers: str
) -> DriverInstall:
    """EL: NVIDIA's CUDA repository only, through its dnf module streams."""
    if source is DriverSource.DISTRO:
        raise UnsupportedDriver(
            "RHEL 9 has no NVIDIA driver in its own repositories; set versions.driver.source: nvidia"
        )
    is_open = flavor is DriverFlavor.OPEN
    stream = f"{branch}-open" if is_open else f"{branch}-dkms"
    meta = "nvidia-open" if is_open else "cuda-drivers"
    return DriverInstall(
        os, source, branch, flavor, (meta,), "nvidia-driver", fm,
        ("dkms", headers, headers.replace("kernel-devel", "kernel-headers", 1)),
        "nvidia-cuda", ("guide-kernel-modules", "cuda-dnf-streams", "guide-version-locking",
                        "ansible-role-nvidia-driver", "azhpc-fabricmanager"),
        dnf_stream=stream, needs_epel=True,
    )  # fmt: skip


def _ubuntu_cuda_driver(
    os: OsFamily, source: DriverSource, branch: int, flavor: DriverFlavor, fm: tuple[str, ...],
    prereq: tuple[str, ...], pinning: str | None,
) -> DriverInstall:  # fmt: skip
    """Ubuntu with NVIDIA's CUDA repository: unversioned names from 590, branch names below."""
    is_open = flavor is DriverFlavor.OPEN
    if branch >= UNVERSIONED_NAMES_FROM:
        module = "nvidia-dkms-open" if is_open else "nvidia-dkms"
        metas: tuple[str, ...] = ("nvidia-open", "nvidia-driver-open") if is_open else ("cuda-drivers", "nvidia-driver")
    else:
        module = f"nvidia-dkms-{branch}-open" if is_open else f"nvidia-dkms-{branch}"
        metas = _ubuntu_branch_metas(branch, is_open)
    cites: tuple[str, ...] = ("guide-flavors", "guide-590-renames", "ansible-role-nvidia-driver", "cns-fabricmanager")
    if is_open and branch < OPEN_METAPACKAGE_FROM:
        cites = ("cuda-local-repo-ubuntu2204-550", "cuda-downloads-open-550", *cites[1:])
    return DriverInstall(
        os, source, branch, flavor, (*metas, module), module, fm, prereq, "nvidia-cuda", cites,
        pinning_package=pinning,
    )  # fmt: skip


def _ubuntu_branch_metas(branch: int, is_open: bool) -> tuple[str, ...]:
    """The metapackages of a branch below 590 in NVIDIA's Ubuntu repositories.

    Below 560 the open flavor has no ``nvidia-open``: its branch packages are the open kernel module
    metapackage and driver, with ``cuda-drivers-<branch>`` (cuda-local-repo-ubuntu2204-550,
    cuda-downloads-open-550); from 560 ``nvidia-open`` is the open flavor (guide-open-default-560).
    """
    if not is_open:
        return (f"cuda-drivers-{branch}",)
    if branch < OPEN_METAPACKAGE_FROM:
        return (f"nvidia-kernel-open-{branch}", f"nvidia-driver-{branch}-open", f"cuda-drivers-{branch}")
    return ("nvidia-open",)


def default_source(os: OsFamily) -> DriverSource:
    """Debian 12: its own non-free archive; Ubuntu and RHEL: NVIDIA's CUDA repository."""
    return DriverSource.DISTRO if os.distribution.driver_from_distro_by_default else DriverSource.NVIDIA


#: Branches the plan fixtures cover for every OS, source and flavor the spec accepts.
FIXTURE_BRANCHES = (535, 570, 580, 590)


# --------------------------------------------------------------------------- DCGM, mig-manager, toolkit repo

#: From this branch the driver is a CUDA 13 driver (cuda-driver-versions); before it, CUDA 12.
CUDA13_FROM_BRANCH = 580


def cuda_major(branch: int) -> int:
    """The CUDA major version a driver branch reports (``nvidia-smi``'s "CUDA Version")."""
    if branch < 525:
        raise UnsupportedDriver(f"driver branch {branch} predates CUDA 12; DCGM 4's packages need 525 or newer")
    return 13 if branch >= CUDA13_FROM_BRANCH else 12


def dcgm_packages(branch: int) -> tuple[str, ...]:
    """DCGM 4 for a driver branch: the CUDA-major packages its diagnostics need (dcgm-install, azhpc-dcgm).

    apt runs without recommends here, so the four packages NVIDIA's metapackage would pull
    are named: core, the CUDA-major diagnostics, proprietary and its CUDA-major part.
    """
    major = cuda_major(branch)
    return (
        "datacenter-gpu-manager-4-core",
        f"datacenter-gpu-manager-4-cuda{major}",
        "datacenter-gpu-manager-4-proprietary",
        f"datacenter-gpu-manager-4-proprietary-cuda{major}",
    )


def dcgm_of_exporter(exporter_version: str) -> str:
    """The DCGM version a dcgm-exporter release is built against (``4.2.3-4.1.3`` -> ``4.2.3``)."""
    return exporter_version.split("-", 1)[0]


#: The first DCGM release per CUDA major whose ``datacenter-gpu-manager-4-cuda<major>`` packages exist:
#: CUDA 13's arrived with DCGM 4.4.0 (dcgm-4.4-cuda13, dcgm-cuda13-packaging); CUDA 12's are in every DCGM 4.
DCGM_CUDA_PACKAGES_FROM: dict[int, str] = {12: "4.0.0", 13: "4.4.0"}

#: A current DCGM pin and the dcgm-exporter release built against it, as the GPU Operator v26.7.0 pins
#: them (dcgm-exporter-4.6.0-4.8.3): the
#: spec's defaults (``versions.dcgm``, ``versions.dcgm_exporter``), valid for every driver branch.
DCGM_PIN = "4.6.0"
DCGM_EXPORTER_PIN = "4.6.0-4.8.3"


def _release(version: str) -> tuple[int, ...]:
    """``4.4.2`` -> ``(4, 4, 2)``; a non-numeric part ends the tuple (``4.5.0~rc1`` -> ``(4, 5)``)."""
    parts: list[int] = []
    for part in version.split(":", 1)[-1].split("-", 1)[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def dcgm_lacks_cuda_packages(branch: int, dcgm_version: str) -> str | None:
    """Why DCGM ``dcgm_version`` has no packages for the driver's CUDA major (None: it has them).

    The message names the first DCGM that ships them and the cited current pin pair.
    """
    major = cuda_major(branch)
    first = DCGM_CUDA_PACKAGES_FROM[major]
    if _release(dcgm_version) >= _release(first):
        return None
    return (
        f"driver branch {branch} is a CUDA {major} driver and DCGM's CUDA {major} packages "
        f"(datacenter-gpu-manager-4-cuda{major}, datacenter-gpu-manager-4-proprietary-cuda{major}) first ship "
        f"with DCGM {first}, so DCGM {dcgm_version} has none: raise versions.dcgm to {first} or newer, "
        f"e.g. versions.dcgm: {DCGM_PIN} with versions.dcgm_exporter: {DCGM_EXPORTER_PIN} (the dcgm-exporter "
        f"release built against it), or set dcgm.enabled: false"
    )


#: NVIDIA's dcgm-exporter package in the CUDA repositories (dcgm-exporter-install, dcgm-exporter-repo-files).
DCGM_EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
#: The unit the package ships (dcgm-exporter-unit); gpuforge keeps it stopped beside its own unit.
DCGM_EXPORTER_PACKAGED_UNIT = "nvidia-dcgm-exporter"


def dcgm_exporter_package_version(exporter_release: str) -> str:
    """The package version of a dcgm-exporter release: its exporter half (``4.4.2-4.7.1`` -> ``4.7.1``)."""
    return exporter_release.split("-", 1)[-1]


MIG_PARTED_RELEASES = "https://github.com/NVIDIA/mig-parted/releases/download"


def mig_manager_file(version: str, platform: Platform) -> str:
    """The release asset of nvidia-mig-manager for the platform (mig-parted-releases)."""
    arch = platform.package_arch
    return (
        f"nvidia-mig-manager_{version}-1_{arch}.deb"
        if platform.is_deb
        else f"nvidia-mig-manager-{version}-1.{arch}.rpm"
    )


#: Docker's repository for RHEL (docker-rhel): containerd.io and docker-ce are not in RHEL's own.
DOCKER_RHEL_BASEURL = "https://download.docker.com/linux/rhel/$releasever/$basearch/stable"
DOCKER_RHEL_GPGKEY = "https://download.docker.com/linux/rhel/gpg"
#: The engine packages per engine on RHEL (docker-rhel) and on Debian/Ubuntu (the distribution's own).
ENGINE_PACKAGES = {
    ("containerd", True): "containerd",
    ("containerd", False): "containerd.io",
    ("docker", True): "docker.io",
    ("docker", False): "docker-ce",
}

#: EPEL 9 as the offline bundle fetches it (epel-repo): Fedora's primary download site in the
#: layout epel.repo's commented baseurl names, and the key epel-release installs.
EPEL_BASEURL = "https://dl.fedoraproject.org/pub/epel/9/Everything/$basearch"
EPEL_GPGKEY = "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9"

#: The primary key fingerprint upstream's InRelease must be signed with, per apt repository kind
#: (cuda-repo-key, container-repo-key). A mirror is held to the same key unless the spec pins the
#: key it re-signs with (sources.mirror_keys; gpuforge.spec.repo_keys).
APT_REPO_FINGERPRINTS: dict[str, str] = {
    "nvidia-cuda": "EB693B3035CD5710E231E123A4B469963BF863CC",
    "nvidia-container": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
}

#: rpm repositories whose metadata upstream signs (``repodata/repomd.xml.asc``, ``repo_gpgcheck=1``:
#: container-toolkit-repo); the others sign each package (``gpgcheck=1``: cuda-rpm-repo, docker-rhel).
RPM_METADATA_SIGNED = frozenset({"nvidia-container"})
#: The primary key fingerprint of each rpm repository's key, per kind: the one its signed metadata
#: carries (the toolkit's one ``gpgkey`` file serves its deb and rpm repositories:
#: container-toolkit-repo, container-repo-key) or its packages' signatures (cuda-rpm-key,
#: docker-rhel-key, epel9-key). The key file must hold exactly this key.
RPM_REPO_FINGERPRINTS: dict[str, str] = {
    "nvidia-container": APT_REPO_FINGERPRINTS["nvidia-container"],
    "nvidia-cuda": "610C7B14E068A878070DA4E99CD0A493D42D0685",
    "docker-ce": "060A61C51B558A7F742B77AAC52FEB6B621E9F35",
    "epel": "FF8AD1344597106ECE813B918A3872BF3228467C",
}

#: The toolkit repository's dnf options, as NVIDIA's own .repo file has them (container-toolkit-repo).
CONTAINER_REPO_DNF_OPTIONS = ("repo_gpgcheck=1", "gpgcheck=0")


# --------------------------------------------------------------------------- GPU Operator with host parts

#: ``helm upgrade`` of the GPU Operator runs its CRD-upgrade hook (on by default since v24.9.0), and then
#: Helm must not validate the new chart's resources against the old CRDs (gpu-operator-upgrade).
GPU_OPERATOR_HELM_FLAGS = ("--disable-openapi-validation",)
#: Where the GPU Operator's driver container mounts the driver: the host toolkit's ``root`` when the
#: operator brings the driver and the host the toolkit (gpu-operator-host-toolkit).
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
