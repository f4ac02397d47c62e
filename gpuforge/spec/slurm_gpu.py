"""How Slurm binds GPUs to jobs, per distribution: one cited data table.

``gres.conf`` either lets slurmd find the GPUs through NVML (``AutoDetect=nvml``: device files,
MIG slices, cores and links) or names each GPU's device file (``File=/dev/nvidiaN``). NVML needs
the distribution's NVML plugin (Debian/Ubuntu: ``slurm-wlm-nvml-plugin``) *installable with the
slurmd it runs*: the plugin's package names one exact ``slurm-wlm-basic-plugins`` version
(``NVML_PLUGINS``). MIG slices can only be bound through NVML: their device files
(``/dev/nvidia-caps/nvidia-cap<N>``) follow the GPU and compute instance IDs the driver hands out
when the slices are made, which only the node knows (``SOURCES['mig-device-nodes']``).

Every row cites where its facts come from; ``tests/slurm/test_gpu_binding.py`` checks the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from debian.debian_support import Version

from gpuforge.spec.citation import Citation
from gpuforge.spec.model import GpuAutodetect, NodeGroup, Spec
from gpuforge.spec.platforms import Arch, OsFamily

SOURCES: dict[str, Citation] = {
    "slurm-gres-autodetect": Citation(
        "Slurm gres.conf(5) (SchedMD/slurm doc/man/man5/gres.conf.5, commit 284c3b95f08a)",
        "https://slurm.schedmd.com/gres.conf.html#OPT_AutoDetect",
        "'nvml: Automatically detect NVIDIA GPUs. Requires the NVIDIA Management Library (NVML)'; 'AutoDetect can "
        "be combined with NodeName to only apply to certain nodes. Node-specific AutoDetects will trump the global "
        "AutoDetect'; 'If a parameter such as File, Cores, or Links are specified when AutoDetect is used, then the "
        "specified values are used to sanity check the auto detected values'; example 'NodeName=tux[0-7] "
        "AutoDetect=nvml' beside 'NodeName=tux[12-15] Name=gpu File=/dev/nvidia[0-3]'",
    ),
    "slurm-gres-mig": Citation(
        "Slurm Generic Resource (GRES) Scheduling, MIG Management (doc/html/gres.shtml)",
        "https://slurm.schedmd.com/gres.html#MIG_Management",
        "'To configure MIGs in Slurm, specify AutoDetect=nvml in gres.conf for the nodes with MIGs, and specify "
        "Gres in slurm.conf as if the MIGs were regular GPUs'; the type 'must be a substring of the \"MIG Profile\" "
        "string'; 'The sanity-check AutoDetect mode is not supported for MIGs'; MIG instances get 'cgroup "
        "isolation and task binding'",
    ),
    "slurm-gres-multiplefiles": Citation(
        "Slurm gres.conf(5) at tags slurm-21-08-5-1 and slurm-22-05-8-1",
        "github.com/SchedMD/slurm doc/man/man5/gres.conf.5",
        "'MultipleFiles ... Graphics cards using Multi-Instance GPU (MIG) technology will present multiple device "
        "files that should be managed as a single generic resource' (absent at 21.08.5, present from 22.05)",
    ),
    "mig-device-nodes": Citation(
        "NVIDIA Multi-Instance GPU User Guide: Device Nodes and Capabilities",
        "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/device-nodes-and-capabilities.html",
        "each physical GPU is /dev/nvidia<N>; access to a MIG GPU instance and compute instance is a capability "
        "device under /dev/nvidia-caps whose minor the driver lists in /proc/driver/nvidia-caps/mig-minors "
        "(gpu<N>/gi<ID>/access, gpu<N>/gi<ID>/ci<ID>/access): the IDs exist once the instances are created",
    ),
    "slurm-cgroup-devices": Citation(
        "Slurm cgroup.conf(5)",
        "https://slurm.schedmd.com/cgroup.conf.html#OPT_ConstrainDevices",
        "'ConstrainDevices: If configured to \"yes\" then constrain the job's allowed devices based on GRES "
        "allocated resources' (the devices named by File=/MultipleFiles= or found by AutoDetect)",
    ),
    "debian12-nvml-plugin": Citation(
        "Debian 12 archive (bookworm, bookworm-security; Release 12.15, 2026-07-11), read with apt",
        "http://deb.debian.org/debian dists/bookworm/contrib/binary-amd64/Packages; "
        "pool/contrib/s/slurm-wlm-contrib/slurm-wlm-nvml-plugin_22.05.8-4+deb12u2_amd64.deb",
        "'Package: slurm-wlm-nvml-plugin Source: slurm-wlm-contrib Version: 22.05.8-4+deb12u2 Architecture: amd64 "
        "Depends: ..., slurm-wlm-basic-plugins (= 22.05.8-4+deb12u2)' (contrib, amd64 only; it ships "
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so) while slurmd is 22.05.8-4+deb12u3 (changelog: "
        "'Add patch to fix CVE-2025-43904', 2025-07-04): 'apt-get install slurmd slurm-wlm-nvml-plugin' -> "
        "'slurm-wlm-nvml-plugin : Depends: slurm-wlm-basic-plugins (= 22.05.8-4+deb12u2) but 22.05.8-4+deb12u3 "
        "is to be installed'",
    ),
    "debian-nvml-plugin-history": Citation(
        "Debian slurm-wlm-contrib changelog (slurm-wlm-nvml-plugin 26.05.5-1, sid)",
        "/usr/share/doc/slurm-wlm-nvml-plugin/changelog.Debian.gz",
        "'slurm-wlm-contrib (22.05.8-2) unstable ... Add nvml plugin to slurm-wlm' (2023-01-25: the first "
        "package); 'slurm-wlm-contrib (23.11.7-2) ... Fix basic plugins version dependency (Closes: #1072209)' "
        "(2024-05-30); sid 26.05.5-1: 'Depends: slurm-wlm-basic-plugins (>= 26.05.5), slurm-wlm-basic-plugins "
        "(<< 26.05.6)'",
    ),
    "debian13-nvml-plugin": Citation(
        "Debian 13 archive (trixie main and contrib, trixie-security; Release 13.8, 2026-11-21), read with apt "
        "from Debian's archive (2026-11-29)",
        "https://packages.debian.org/trixie/slurm-wlm-nvml-plugin ; https://packages.debian.org/trixie/slurmd",
        "'Package: slurm-wlm-nvml-plugin / Source: slurm-wlm-contrib / Version: 24.11.5-2 / Architecture: amd64 / "
        "Depends: libc6 (>= 2.38), slurm-wlm-basic-plugins (>= 24.11.5), slurm-wlm-basic-plugins (<< 24.11.6) / "
        "Section: contrib/libs' (amd64 only; './usr/lib/x86_64-linux-gnu/slurm-wlm/gpu_nvml.so'); 'Package: slurmd / "
        "Source: slurm-wlm / Version: 24.11.5-4+deb13u1 / Depends: ..., slurm-wlm-basic-plugins (= 24.11.5-4+deb13u1)' "
        "(trixie main and trixie-security, amd64 and arm64)",
    ),
    "ubuntu-slurm": Citation(
        "Ubuntu packages: slurmd in jammy and noble",
        "https://packages.ubuntu.com/noble/slurmd ; https://manpages.ubuntu.com/manpages/jammy/man5/gres.conf.5.html",
        "noble: 'slurmd (23.11.4-1.2ubuntu5) [universe]', 'dep: slurm-wlm-basic-plugins (= 23.11.4-1.2ubuntu5)'; "
        "jammy: 'Provided by: slurm-client_21.08.5-2ubuntu1'. slurm-wlm-nvml-plugin is listed for questing "
        "(24.11.5-4) and resolute (25.11.2-2) in multiverse; no listing for noble or jammy was found",
    ),
}


@dataclass(frozen=True)
class NvmlPlugin:
    """The NVML plugin of one distribution's Slurm packages.

    ``package`` is None where the distribution ships none. ``built_for`` is the one Slurm version
    the plugin installs with (its exact ``slurm-wlm-basic-plugins`` dependency; None: unknown), or with
    ``built_below`` the lowest of a range (``>= built_for``, ``<< built_below``, as Debian's packages
    depend since 23.11.7-2); ``archive_slurm`` is the slurmd version the archive installs today.
    """

    os: OsFamily
    package: str | None
    built_for: str | None
    archive_slurm: str | None
    arches: tuple[Arch, ...]
    why: str
    cites: tuple[str, ...]
    built_below: str | None = None

    def installs_with(self, slurm: str) -> bool:
        """The plugin's ``slurm-wlm-basic-plugins`` dependency holds for Slurm package version ``slurm``."""
        if self.built_for is None:
            return False
        if self.built_below is None:
            return slurm == self.built_for
        return Version(self.built_for) <= Version(slurm) < Version(self.built_below)


NVML_PLUGINS: dict[OsFamily, NvmlPlugin] = {
    p.os: p
    for p in (
        NvmlPlugin(
            OsFamily.DEBIAN12, "slurm-wlm-nvml-plugin", "22.05.8-4+deb12u2", "22.05.8-4+deb12u3", (Arch.X86_64,),
            "Debian 12's slurm-wlm-nvml-plugin (contrib, amd64 only) is 22.05.8-4+deb12u2 and depends on "
            "slurm-wlm-basic-plugins (= 22.05.8-4+deb12u2), while the archive's slurmd is 22.05.8-4+deb12u3: apt "
            "cannot install both",
            ("debian12-nvml-plugin", "debian-nvml-plugin-history"),
        ),
        NvmlPlugin(
            OsFamily.DEBIAN13, "slurm-wlm-nvml-plugin", "24.11.5", "24.11.5-4+deb13u1", (Arch.X86_64,),
            "Debian 13's slurm-wlm-nvml-plugin 24.11.5-2 (contrib, amd64 only) installs with any "
            "slurm-wlm-basic-plugins from 24.11.5 up to 24.11.6, the archive's slurmd among them",
            ("debian13-nvml-plugin", "debian-nvml-plugin-history"), built_below="24.11.6",
        ),
        NvmlPlugin(
            OsFamily.UBUNTU2204, None, None, "21.08.5-2ubuntu1", (),
            "Ubuntu 22.04 ships Slurm 21.08.5 and no slurm-wlm-nvml-plugin (Debian first packaged it in January "
            "2023, with Slurm 22.05.8)",
            ("ubuntu-slurm", "debian-nvml-plugin-history"),
        ),
        NvmlPlugin(
            OsFamily.UBUNTU2404, "slurm-wlm-nvml-plugin", None, "23.11.4-1.2ubuntu5", (Arch.X86_64, Arch.AARCH64),
            "no listing confirms an Ubuntu 24.04 slurm-wlm-nvml-plugin that installs with its slurmd "
            "23.11.4-1.2ubuntu5 (Debian relaxed the plugin's exact slurm-wlm-basic-plugins dependency only in "
            "23.11.7-2, after 24.04 was released)",
            ("ubuntu-slurm", "debian-nvml-plugin-history"),
        ),
    )
}  # fmt: skip

NO_PLUGIN_EL = (
    "gpuforge's table has no NVML plugin package for Enterprise Linux 9's Slurm (EPEL's packages were not checked)"
)


def nvml_plugin(os: OsFamily) -> NvmlPlugin | None:
    """The table's row for ``os`` (None: Enterprise Linux, not in the table)."""
    return NVML_PLUGINS.get(os)


def nvml_installs(os: OsFamily, arch: Arch, slurm_version: str) -> bool:
    """The distribution's NVML plugin installs beside the Slurm that ``versions.slurm`` names."""
    row = nvml_plugin(os)
    if row is None or row.package is None or row.built_for is None or arch not in row.arches:
        return False
    installed = row.archive_slurm if slurm_version == "distro" else slurm_version
    return installed is not None and row.installs_with(installed)


def nvml_missing_reason(os: OsFamily) -> str:
    """Why ``AutoDetect=nvml`` is not chosen by itself on ``os``."""
    row = nvml_plugin(os)
    return NO_PLUGIN_EL if row is None else row.why


def uses_nvml(spec: Spec, group: NodeGroup) -> bool:
    """The group's gres.conf lines let slurmd find its GPUs through NVML (``slurm.gpu_autodetect``)."""
    setting = spec.slurm.gpu_autodetect if spec.slurm else GpuAutodetect.OFF
    if setting is GpuAutodetect.AUTO and spec.slurm is not None and spec.slurm.build is not None:
        return spec.slurm.build.nvml  # gpuforge's build has gpu_nvml.so when built with NVML
    if setting is GpuAutodetect.AUTO:
        return nvml_installs(group.os or spec.cluster.os, group.arch, spec.versions.slurm)
    return setting is GpuAutodetect.NVML


#: The device files of whole GPUs (``File=``): one per GPU, numbered by the driver.
def gpu_device_files(count: int) -> str:
    """``/dev/nvidia[0-7]`` (Slurm's numeric range form) or ``/dev/nvidia0``."""
    return f"/dev/nvidia[0-{count - 1}]" if count > 1 else "/dev/nvidia0"
