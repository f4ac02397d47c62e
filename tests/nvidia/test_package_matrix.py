"""Every OS x source x branch x flavor the spec accepts: the exact packages the driver layer plans.

The expectations are written out here from the cited upstream pages (see
``gpuforge.spec.nvidia_packages.SOURCES``), not computed from that table, so a wrong row in
the table fails here. Combinations nobody ships are refused by ``gpuforge check`` instead.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.errors import SpecError
from gpuforge.spec.model import DriverFlavor, DriverSource, OsFamily
from gpuforge.spec.nvidia_packages import FIXTURE_BRANCHES, SOURCES, UnsupportedDriver, driver_install
from gpuforge.spec.platforms import platform_for
from tests import yaml_text
from tests.helpers import jammy_data

REPO = Path(__file__).resolve().parents[2]
VERSIONS = {535: "535.261.03", 570: "570.195.03", 580: "580.105.08", 590: "590.48.01"}
KERNEL = {"debian12": "6.1.0-28-amd64", "ubuntu22.04": "5.15.0-126-generic", "ubuntu24.04": "6.8.0-49-generic",
          "rhel9": "5.14.0-427.13.1.el9_4.x86_64"}  # fmt: skip


def expected_deb(os: str, source: str, b: int, flavor: str) -> tuple[str, ...] | None:
    """apt packages of the driver layer on an HGX node (driver + fabric manager); None: refused."""
    k = KERNEL[os]
    open_ = flavor == "open"
    if os == "debian12" and source == "distro":
        if b != 535:
            return None
        drv = (
            ("nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "libcuda1", "firmware-nvidia-gsp")
            if open_
            else ("nvidia-driver", "nvidia-smi", "nvidia-persistenced", "firmware-nvidia-gsp")
        )
        return (*drv, "linux-headers-amd64", "nvidia-fabricmanager-535", "libnvidia-nscq-535")
    # the fabric manager with its NSCQ library (issue 32 item 3; nvidia_packages nscq-cuda-repo)
    fm_cuda = (
        ("nvidia-fabricmanager", "libnvidia-nscq") if b >= 580 else (f"nvidia-fabricmanager-{b}", f"libnvidia-nscq-{b}")
    )
    pin = (f"nvidia-driver-pinning-{b}",) if b >= 590 else ()
    prereq = (f"linux-headers-{k}", "dkms")
    if os == "debian12":
        drv = ("nvidia-kernel-open-dkms", "nvidia-open") if open_ else ("nvidia-kernel-dkms", "cuda-drivers")
        return (*drv, *pin, *prereq, *fm_cuda)
    if source == "distro":  # Canonical's archive
        head = f"nvidia-headless-{b}-server-open" if open_ else f"nvidia-headless-{b}-server"
        return (head, f"nvidia-utils-{b}-server", *prereq, f"nvidia-fabricmanager-{b}", f"libnvidia-nscq-{b}")
    if b >= 590:
        drv = (
            ("nvidia-dkms-open", "nvidia-open", "nvidia-driver-open")
            if open_
            else ("nvidia-dkms", "cuda-drivers", "nvidia-driver")
        )
    elif not open_:
        drv = (f"nvidia-dkms-{b}", f"cuda-drivers-{b}")
    elif b < 560:  # issue 32 item 4: the 550-era repository has no nvidia-open (its driver repository's file
        # list: cuda-drivers-550, nvidia-kernel-open-550, nvidia-driver-550-open; CUDA 12.4 downloads page:
        # "apt-get install -y nvidia-kernel-open-550", "apt-get install -y cuda-drivers-550")
        drv = (f"nvidia-dkms-{b}-open", f"nvidia-kernel-open-{b}", f"nvidia-driver-{b}-open", f"cuda-drivers-{b}")
    else:  # from 560 the open flavor is nvidia-open (driver installation guide, kernel modules)
        drv = (f"nvidia-dkms-{b}-open", "nvidia-open")
    return (*drv, *pin, *prereq, *fm_cuda)


def spec_for(os: str, source: str, b: int, flavor: str) -> str:
    data = yaml.safe_load((REPO / "inventories/slurm-h100.yaml").read_text())
    data["cluster"]["os"] = os
    data["versions"]["driver"] = {"version": VERSIONS[b], "flavor": flavor, "source": source}
    data["versions"].pop("cuda_toolkit", None)
    # The default DCGM pin (4.6.0) ships every CUDA major's packages; the example's 4.2.3 has no CUDA 13 ones.
    data["versions"].pop("dcgm", None)
    data["versions"].pop("dcgm_exporter", None)
    data["sources"] = {"mode": "upstream"}
    return yaml_text.dump(jammy_data(data))


COMBOS = list(
    itertools.product(["debian12", "ubuntu22.04", "ubuntu24.04", "rhel9"], ["distro", "nvidia"], FIXTURE_BRANCHES,
                      ["proprietary", "open"])
)  # fmt: skip


def driver_plan(text: str, os: str) -> tuple[tuple[str, ...], list[str]]:
    s = parse_spec(text)
    node = next(n for n in resolve_nodes(s) if n.name == "gpu001")
    hf = HostFacts(gpus=["2330"] * 8, nvswitches=["22a3"] * 4, kernel_release=KERNEL[os])
    ctx = nvidia_needs.Ctx.build(s, node, hf)
    layer = nv.driver_layer(ctx)
    steps, _ = plan_layer(layer, LayerFacts())
    return layer.packages, [s.command or "" for s in steps]


@pytest.mark.parametrize(("os", "source", "branch", "flavor"), COMBOS, ids=lambda v: str(v))
def test_driver_packages(os: str, source: str, branch: int, flavor: str) -> None:
    text = spec_for(os, source, branch, flavor)
    if os == "rhel9":
        if source == "distro":
            with pytest.raises(SpecError, match="RHEL 9 has no NVIDIA driver"):
                parse_spec(text)
            return
        _, commands = driver_plan(text, os)
        k = KERNEL[os]
        stream = f"{branch}-open" if flavor == "open" else f"{branch}-dkms"
        meta = "nvidia-open" if flavor == "open" else "cuda-drivers"
        fm = "nvidia-fabricmanager" if branch >= 580 else "nvidia-fabric-manager"
        joined = "\n".join(commands)
        assert f"dnf -y install python3-dnf-plugin-versionlock dkms kernel-devel-{k} kernel-headers-{k}" in joined
        assert f"dnf -y module enable nvidia-driver:{stream}" in joined
        assert f"dnf -y install --allowerasing {meta}-{VERSIONS[branch]} &&" in joined
        assert f"dnf versionlock add '*nvidia*-{VERSIONS[branch]}-*'" in joined
        # locked before the install: what the metapackage requires cannot float past the pin
        assert joined.index("dnf versionlock add") < joined.index(f"dnf -y install --allowerasing {meta}")
        assert f"dnf -y install {fm}-{VERSIONS[branch]}" in joined
        assert "apt-get" not in joined
        return
    want = expected_deb(os, source, branch, flavor)
    if want is None:
        with pytest.raises(SpecError, match="ships only driver branch 535"):
            parse_spec(text)
        return
    packages, commands = driver_plan(text, os)
    assert packages == want
    version_package = want[0]
    assert any(f"dpkg-query -W -f='${{Version}}' {version_package} " in c for c in commands), commands


def test_every_row_cites_known_sources() -> None:
    rows = 0
    for os, source, flavor in itertools.product(OsFamily, DriverSource, DriverFlavor):
        for b in FIXTURE_BRANCHES:
            try:
                row = driver_install(os, source, b, flavor)
            except UnsupportedDriver as e:
                assert "set versions.driver.source" in str(e)  # the refusal names the alternative
                continue
            rows += 1
            assert row.cites and set(row.cites) <= set(SOURCES), row
            assert row.version_package in row.packages or os.is_rpm  # EL: nvidia-driver, a dependency
    assert rows == 6 * 4 * 2 + 2 + 2 * 4 * 2  # nvidia: every OS (EL 9 x3 alike); Debian archive: 535; Ubuntu: all


def test_secure_boot_on_is_reported() -> None:
    """Canonical's docs: DKMS modules are not signed for Secure Boot; cloud-native-stack refuses it (mokutil)."""
    s = parse_spec(spec_for("ubuntu24.04", "nvidia", 580, "open"))
    node = next(n for n in resolve_nodes(s) if n.name == "gpu001")
    notes = {}
    for state in (True, False, None):
        hf = HostFacts(gpus=["2330"] * 8, nvswitches=["22a3"] * 4, secure_boot=state)
        steps, _ = plan_layer(nv.driver_layer(nvidia_needs.Ctx.build(s, node, hf)), LayerFacts())
        notes[state] = [st.summary for st in steps if "Secure Boot" in st.summary]
    assert len(notes[True]) == 1 and "mokutil --import" in notes[True][0]
    assert notes[False] == [] and notes[None] == []


# DCGM 4: the driver's CUDA major picks the diagnostics packages (NVIDIA DCGM docs, Install DCGM; CUDA
# release notes: 535/550/570 are CUDA 12 drivers, 580 and later CUDA 13). Written out, not computed.
# The CUDA 13 packages exist from DCGM 4.4.0 (NVIDIA/DCGM cmake/packaging.cmake: none at v4.3.1, -cuda13 at
# v4.4.1; NVIDIA/DCGM#249: "DCGM 4.3.1 does not provide full CUDA 13 support"; dcgm-exporter 4.4.0-4.5.0:
# "Update to DCGM 4.4 and Cuda 13.0"), so the plan installs them at the default pin, DCGM 4.6.0.
DCGM_BY_BRANCH = {
    535: ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12",
          "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda12"),
    570: ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12",
          "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda12"),
    580: ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
          "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13"),
    590: ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
          "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13"),
}  # fmt: skip


@pytest.mark.parametrize("os", ["ubuntu24.04", "rhel9"])
@pytest.mark.parametrize("branch", FIXTURE_BRANCHES)
def test_dcgm_packages_follow_the_drivers_cuda_major(os: str, branch: int) -> None:
    """The DCGM layer installs the four packages of the driver's CUDA major (apt and dnf alike)."""
    spec = parse_spec(
        yaml_text.dump(
            {
                "cluster": {"name": "t", "scheduler": "slurm", "os": os},
                "versions": {"driver": {"version": VERSIONS[branch], "source": "nvidia"}},
                "node_groups": [
                    {"name": "ctl", "hosts": "ctl1", "roles": ["controller"]},
                    {"name": "gpu", "hosts": "gpu1", "roles": ["compute"],
                     "hardware": {"gpu": {"model": "H100-80GB", "count": 8}, "sockets": 1, "cores_per_socket": 4,
                                  "threads_per_core": 1, "real_memory_mb": 8000}},
                ],
                "slurm": {"accounting": {"enabled": False}, "partitions": [{"name": "b", "nodes": "gpu"}]},
            }
        )
    )  # fmt: skip
    node = next(n for n in resolve_nodes(spec) if n.name == "gpu1")
    host = HostFacts(gpus=("2330",) * 8, loaded_driver=VERSIONS[branch])
    ctx = nvidia_needs.Ctx.build(spec, node, host)
    layer = dict(nv.nvidia_layers(ctx))["DCGM and dcgm-exporter"]
    steps, _ = plan_layer(layer, LayerFacts())
    install = next(s for s in steps if s.summary.startswith("install"))
    words = [w.rstrip(";") for w in (install.command or "").split()]
    want = DCGM_BY_BRANCH[branch]
    got = [w for w in words if w.startswith("datacenter-gpu-manager")]
    # and dcgm-exporter's package at the exporter half of its release (issue 32 item 2)
    if os == "rhel9":
        assert got == [*(f"{p}-4.6.0" for p in want), "datacenter-gpu-manager-exporter-4.8.3"]
    else:
        assert set(got) == {*want, "datacenter-gpu-manager-exporter"}


def test_dcgm_defaults_are_a_cited_pair_with_every_cuda_majors_packages() -> None:
    """versions.dcgm / dcgm_exporter default to DCGM 4.6.0 and dcgm-exporter 4.6.0-4.8.3 (its hack/VERSION)."""
    from gpuforge.spec import nvidia_packages as t
    from gpuforge.spec.model import Versions

    v = Versions()
    assert (v.dcgm, v.dcgm_exporter) == ("4.6.0", "4.6.0-4.8.3") == (t.DCGM_PIN, t.DCGM_EXPORTER_PIN)
    assert t.dcgm_of_exporter(v.dcgm_exporter) == v.dcgm
    assert t.DCGM_CUDA_PACKAGES_FROM[13] == "4.4.0"
    assert {"dcgm-cuda13-packaging", "dcgm-4.4-cuda13", "dcgm-exporter-4.6.0-4.8.3"} <= set(SOURCES)
    for branch in FIXTURE_BRANCHES:
        assert t.dcgm_lacks_cuda_packages(branch, v.dcgm) is None


# (driver branch, DCGM, the dcgm-exporter release built against it): real upstream tag pairs.
DCGM_CASES = [
    (570, "4.2.3", "4.2.3-4.1.3", None),  # a CUDA 12 driver: DCGM 4.2.3 has -cuda12
    (580, "4.2.3", "4.2.3-4.1.3", "4.4.0"),  # the audit's plan: datacenter-gpu-manager-4-cuda13 4.2.3 does not exist
    (580, "4.3.1", "4.3.1-4.4.0", "4.4.0"),
    (590, "4.3.1", "4.3.1-4.4.0", "4.4.0"),
    (580, "4.4.0", "4.4.0-4.5.0", None),  # the first DCGM with the CUDA 13 packages
    (590, "4.6.0", "4.6.0-4.8.3", None),
]


@pytest.mark.parametrize(("branch", "dcgm", "exporter", "first"), DCGM_CASES)
def test_dcgm_without_the_drivers_cuda_packages_is_refused(
    branch: int, dcgm: str, exporter: str, first: str | None
) -> None:
    """A CUDA 13 driver with a DCGM older than 4.4.0 is refused before any host is touched, naming the fix."""
    text = spec_for("ubuntu24.04", "nvidia", branch, "open")
    data = yaml.safe_load(text)
    data["versions"].update(dcgm=dcgm, dcgm_exporter=exporter)
    if first is None:
        parse_spec(yaml_text.dump(data))
        return
    with pytest.raises(SpecError) as info:
        parse_spec(yaml_text.dump(data))
    [issue] = info.value.issues
    line = issue.format("spec.yaml")
    assert "versions.dcgm: " in line
    assert f"driver branch {branch} is a CUDA 13 driver" in line
    assert f"first ship with DCGM {first}, so DCGM {dcgm} has none" in line
    assert "raise versions.dcgm to 4.4.0 or newer" in line
    assert "versions.dcgm: 4.6.0 with versions.dcgm_exporter: 4.6.0-4.8.3" in line


def test_mig_manager_and_toolkit_repo_facts() -> None:
    """mig-manager's release file names and the toolkit .repo options, as upstream publishes them."""
    from gpuforge.spec import nvidia_packages as t

    assert t.mig_manager_file("0.9.1", platform_for(OsFamily.UBUNTU2404)) == "nvidia-mig-manager_0.9.1-1_amd64.deb"
    assert t.mig_manager_file("0.9.1", platform_for(OsFamily.RHEL9)) == "nvidia-mig-manager-0.9.1-1.x86_64.rpm"
    assert t.MIG_PARTED_RELEASES == "https://github.com/NVIDIA/mig-parted/releases/download"
    assert set(t.CONTAINER_REPO_DNF_OPTIONS) == {"repo_gpgcheck=1", "gpgcheck=0"}
    assert t.dcgm_of_exporter("4.2.3-4.1.3") == "4.2.3"
    with pytest.raises(UnsupportedDriver, match="predates CUDA 12"):
        t.cuda_major(470)
