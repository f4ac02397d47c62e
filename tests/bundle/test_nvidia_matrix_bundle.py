"""The bundle's driver packages for every OS x source x branch x flavor the spec accepts.

The combinations come from the table the plan matrix uses (``nvidia_packages.driver_install`` over
``FIXTURE_BRANCHES``; what it refuses the spec refuses). For each, the bundle's needs of a cluster
with NVSwitch (HGX) and PCIe GPU nodes are resolved, as ``gpuforge bundle`` resolves them, against
that OS's NVIDIA repository in miniature (``tests.bundle.nvidia_repos``: every branch, each release
beside a later point release of its branch): the result must be exactly the pinned packages,
spelled as the repository spells them. What the nodes install from NVIDIA's CUDA repository is
written out here from the cited upstream pages, not computed from the table.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gpuforge.bundle.debian import PackageIndex, parse_packages
from gpuforge.bundle.downloads import RepoNeed, spec_needs
from gpuforge.bundle.resolve import Pin, Want, resolve
from gpuforge.bundle.rpm_resolve import RpmIndex, hidden_by_modules, resolve_rpm
from gpuforge.bundle.rpmmd import REPOMD, Dep, Evr, RpmPackage, module_artifacts, open_md, parse_primary, parse_repomd
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.model import DriverFlavor, DriverSource, OsFamily
from gpuforge.spec.nvidia_packages import FIXTURE_BRANCHES, UnsupportedDriver, driver_install
from tests.bundle import nvidia_repos as repos
from tests.bundle.conftest import RepoKey
from tests.bundle.rpmrepo import require_rpm_tools, rpm_repo
from tests.helpers import jammy_tracking

SPEC = """\
cluster: {{name: matrix, scheduler: slurm, os: {os}}}
sources: {{mode: upstream}}
versions:
  driver: {{version: {version}, flavor: {flavor}, source: {source}}}
node_groups:
  - name: ctl
    hosts: ctl01
    roles: [controller, accounting-db]
  - name: hgx
    hosts: hgx[01-02]
    roles: [compute]
    hardware:
      gpu: {{model: H100-80GB, count: 8}}
      nvswitch: true
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
  - name: pcie
    hosts: pcie01
    roles: [compute]
    hardware:
      gpu: {{model: H100-80GB, count: 2}}
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
container_runtime: {{engine: containerd, cdi: true}}
dcgm: {{enabled: false}}
slurm:
  partitions: [{{name: gpu, nodes: hgx, default: true}}, {{name: pcie, nodes: pcie}}]
"""


def _accepted(os: OsFamily, source: DriverSource, b: int, flavor: DriverFlavor) -> bool:
    try:
        driver_install(os, source, b, flavor)
    except UnsupportedDriver:
        return False
    return True


#: RHEL 9 and its rebuilds: one repository (NVIDIA's rhel9), one install (guide-el-distributions).
EL9 = ("rhel9", "rocky9", "alma9")

COMBOS = [
    (os.value, source.value, b, flavor.value)
    for os, source, b, flavor in itertools.product(OsFamily, DriverSource, FIXTURE_BRANCHES, DriverFlavor)
    if _accepted(os, source, b, flavor)
]


def cuda_repo_roots(os: str, source: str, b: int, flavor: str) -> set[str]:
    """What an HGX node installs from NVIDIA's CUDA repository (written from the upstream pages the
    table cites: guide-flavors, guide-590-renames, cns-fabricmanager, azhpc-fabricmanager,
    guide-kernel-modules); the kernel headers and dkms come from the OS (and EPEL)."""
    open_ = flavor == "open"
    nscq = "libnvidia-nscq" if b >= 580 else f"libnvidia-nscq-{b}"  # with the fabric manager (nscq-cuda-repo)
    if os in EL9:
        fm = "nvidia-fabricmanager" if b >= 580 else "nvidia-fabric-manager"
        return {"nvidia-open" if open_ else "cuda-drivers", "nvidia-driver", fm, nscq}
    fm = "nvidia-fabricmanager" if b >= 580 else f"nvidia-fabricmanager-{b}"
    if source == "distro":  # Debian's archive has no fabric manager; Canonical's has its own
        return {fm, nscq} if os == "debian12" else set()
    pinning = {f"nvidia-driver-pinning-{b}"} if b >= 590 else set()
    if os == "debian12":
        drv = {"nvidia-open", "nvidia-kernel-open-dkms"} if open_ else {"cuda-drivers", "nvidia-kernel-dkms"}
    elif b >= 590:
        drv = {"nvidia-open", "nvidia-driver-open", "nvidia-dkms-open"} if open_ else {
            "cuda-drivers", "nvidia-driver", "nvidia-dkms"}  # fmt: skip
    elif open_ and b < 560:  # no nvidia-open before 560 (cuda-local-repo-ubuntu2204-550, cuda-downloads-open-550)
        drv = {f"nvidia-kernel-open-{b}", f"nvidia-driver-{b}-open", f"cuda-drivers-{b}", f"nvidia-dkms-{b}-open"}
    else:
        drv = {"nvidia-open", f"nvidia-dkms-{b}-open"} if open_ else {f"cuda-drivers-{b}", f"nvidia-dkms-{b}"}
    return drv | {fm, nscq} | pinning


def cuda_need(os: str, source: str, b: int, flavor: str, group: str) -> RepoNeed | None:
    """The bundle's CUDA-repository need of one node group."""
    spec = parse_spec(SPEC.format(os=os, version=repos.VERSIONS[b], flavor=flavor, source=source) + jammy_tracking(os))
    nodes = [n for n in resolve_nodes(spec) if n.name.startswith(group)]
    found = [n for (_, kind, _), n in spec_needs(spec, nodes).repos.items() if kind == "nvidia-cuda"]
    assert len(found) <= 1
    return found[0] if found else None


@pytest.fixture(scope="module")
def apt_indexes() -> dict[str, PackageIndex]:
    """NVIDIA's three flat repositories, every branch in each."""
    return {
        d: PackageIndex(parse_packages(repos.packages_text(repos.apt_repo_debs(d))))
        for d in ("debian12", "ubuntu2204", "ubuntu2404")
    }


@pytest.fixture(scope="module")
def rhel_repo(tmp_path_factory: pytest.TempPathFactory, repo_key: RepoKey) -> Path:
    """NVIDIA's rhel9 repository: real rpms (rpmbuild), createrepo_c, every branch's streams (modifyrepo_c)."""
    require_rpm_tools()
    root = tmp_path_factory.mktemp("rhel9-cuda")
    work = tmp_path_factory.mktemp("rhel9-rpms")
    modules = repos.rhel_modules_yaml(repos.rhel_streams(), default="590-open")
    rpm_repo(root / "rhel9", repos.rhel_repo_rpms(), work, repo_key, "D42D0685.pub", sign="none", modules=modules)
    return root / "rhel9"


def rhel_resolution(repo: Path, need: RepoNeed) -> tuple[dict[str, str], set[str], list[str]]:
    """(package -> version, external requirements, problems) as rpm_repo_bundle resolves ``need``."""
    md = parse_repomd((repo / REPOMD).read_bytes())
    with open_md(repo / md["modules"].href) as f:
        artifacts = module_artifacts(f.read())
    idx = RpmIndex.build(parse_primary(repo / md["primary"].href), hidden_by_modules(artifacts, need.module_streams))
    res = resolve_rpm(idx, need.wants.values(), need.pins)
    return {n: p.version for n, p in res.selected.items()}, set(res.external), res.problems


def test_the_matrix_is_the_tables() -> None:
    """Every branch and flavor from NVIDIA's CUDA repository on every OS; Debian's archive only 535;
    Ubuntu's archive (Canonical) every branch; RHEL nothing of its own."""
    assert len(COMBOS) == 66  # Rocky 9 and Alma 9 add RHEL 9's 16 rows (NVIDIA's rhel9 repository)
    assert not any(os in EL9 and source == "distro" for os, source, _, _ in COMBOS)
    assert {b for os, source, b, _ in COMBOS if (os, source) == ("debian12", "distro")} == {535}


@pytest.mark.parametrize(("os", "source", "branch", "flavor"), COMBOS, ids=lambda v: str(v))
def test_bundle_resolves_the_pinned_driver(
    os: str, source: str, branch: int, flavor: str, apt_indexes: dict[str, PackageIndex], request: pytest.FixtureRequest
) -> None:
    hgx = cuda_need(os, source, branch, flavor, "hgx")
    pcie = cuda_need(os, source, branch, flavor, "pcie")
    roots = cuda_repo_roots(os, source, branch, flavor)
    if not roots:  # Canonical's archive: nothing of the driver from NVIDIA's repository
        assert hgx is None and pcie is None
        return
    assert hgx is not None
    distro = hgx.distro
    assert distro == {"ubuntu22.04": "ubuntu2204", "ubuntu24.04": "ubuntu2404"}.get(os, "rhel9" if os in EL9 else os)
    assert set(hgx.wants) == roots
    fm = {w for w in roots if "fabric" in w or "nscq" in w}
    # Only NVSwitch nodes run the fabric manager.
    assert pcie is None if roots == fm else pcie is not None and set(pcie.wants) == roots - fm
    if os in EL9:
        stream = f"{branch}-open" if flavor == "open" else f"{branch}-dkms"
        assert hgx.module_streams == {("nvidia-driver", stream)}
        rhel_repo: Path = request.getfixturevalue("rhel_repo")  # built once, for the RHEL rows only
        got, external, problems = rhel_resolution(rhel_repo, hgx)
        assert problems == []
        assert got == repos.rhel_bundled(branch, flavor)
        assert external == {"dkms", "kernel-devel", "libc.so.6()(64bit)"}  # EPEL and the OS
        assert pcie is not None
        got, _, problems = rhel_resolution(rhel_repo, pcie)
        assert problems == [] and got == repos.rhel_bundled(branch, flavor, fabric=False)
        return
    res = resolve(apt_indexes[distro], hgx.wants.values(), hgx.pins)
    assert res.problems == []
    got = {n: s.version for n, s in res.selected.items()}
    if source == "distro":  # Debian 12's archive driver: only the fabric manager from NVIDIA's repository
        assert got == {
            f"{p}-{branch}": f"{repos.VERSIONS[branch]}-1" for p in ("nvidia-fabricmanager", "libnvidia-nscq")
        }
        assert res.external == {}
        return
    assert got == repos.apt_bundled(distro, branch, flavor)
    assert set(res.external) == {"dkms", "libc6 (>= 2.34)"}  # the OS archive's
    assert pcie is not None
    res = resolve(apt_indexes[distro], pcie.wants.values(), pcie.pins)
    assert res.problems == []
    assert {n: s.version for n, s in res.selected.items()} == repos.apt_bundled(distro, branch, flavor, fabric=False)


def test_spelled_versions_of_one_row_each() -> None:
    """The expectations' spelling, written out once per repository kind."""
    assert repos.apt_bundled("ubuntu2204", 535, "proprietary") == {
        "cuda-drivers-535": "535.261.03-1",
        "nvidia-driver-535": "535.261.03-0ubuntu1",
        "nvidia-dkms-535": "535.261.03-0ubuntu1",
        "nvidia-kernel-source-535": "535.261.03-0ubuntu1",
        "nvidia-kernel-common-535": "535.261.03-0ubuntu1",
        "libnvidia-compute-535": "535.261.03-0ubuntu1",
        "nvidia-utils-535": "535.261.03-0ubuntu1",
        "nvidia-fabricmanager-535": "535.261.03-1",
        "libnvidia-nscq-535": "535.261.03-1",  # NSCQ beside the fabric manager (nscq-cuda-repo)
    }
    assert repos.apt_bundled("ubuntu2404", 590, "open") == {
        "nvidia-open": "590.48.01-0ubuntu1",
        "nvidia-driver-open": "590.48.01-0ubuntu1",
        "nvidia-dkms-open": "590.48.01-0ubuntu1",
        "nvidia-kernel-source-open": "590.48.01-0ubuntu1",
        "nvidia-kernel-common": "590.48.01-0ubuntu1",
        "libnvidia-compute": "590.48.01-0ubuntu1",
        "nvidia-utils": "590.48.01-0ubuntu1",
        "nvidia-fabricmanager": "590.48.01-1",
        "libnvidia-nscq": "590.48.01-1",
        "nvidia-driver-pinning-590": "590-2",
    }
    assert repos.apt_bundled("debian12", 580, "proprietary") == {
        "cuda-drivers": "580.105.08-1",
        "nvidia-kernel-dkms": "580.105.08-1",
        "nvidia-driver": "580.105.08-1",
        "nvidia-driver-libs": "580.105.08-1",
        "nvidia-driver-cuda": "580.105.08-1",
        "libcuda1": "580.105.08-1",
        "firmware-nvidia-gsp": "580.105.08-1",
        "nvidia-fabricmanager": "580.105.08-1",
        "libnvidia-nscq": "580.105.08-1",
    }
    assert repos.rhel_bundled(570, "proprietary") == {
        "cuda-drivers": "570.195.03-1",
        "kmod-nvidia-latest-dkms": "3:570.195.03-1.el9",
        "nvidia-driver": "3:570.195.03-1.el9",
        "nvidia-driver-libs": "3:570.195.03-1.el9",
        "nvidia-driver-cuda": "3:570.195.03-1.el9",
        "nvidia-kmod-common": "3:570.195.03-1.el9",
        "nvidia-fabric-manager": "570.195.03-1",
        "libnvidia-nscq-570": "570.195.03-1",
    }


def _rpm(name: str, evr: Evr, requires: tuple[Dep, ...] = (), provides: tuple[Dep, ...] = ()) -> RpmPackage:
    own = Dep(name, "EQ", evr)
    return RpmPackage(name, "x86_64", evr, f"id-{name}-{evr}", "sha256", f"{name}.rpm", None, (own, *provides),
                      requires, ())  # fmt: skip


def test_rpm_requirements_take_the_pinned_point_release() -> None:
    """cuda-drivers requires the driver from the branch's first release on; within the enabled stream
    every point release meets that: the one the nodes lock (``*nvidia*-<pin>-*``) is bundled, as the
    apt preference does for Debian and Ubuntu; without a pin, dnf's newest."""
    pin, new = Evr(3, "570.195.03", "1.el9"), Evr(3, "570.211.01", "1.el9")
    floor = Evr(3, "570.86.10", None)
    pkgs = [
        _rpm("cuda-drivers", Evr(0, "570.195.03", "1"), (Dep("nvidia-driver-cuda", "GE", floor),
                                                          Dep("nvidia-kmod", "GE", floor))),
        *(_rpm("nvidia-driver-cuda", v) for v in (pin, new)),
        *(_rpm("kmod-nvidia-latest-dkms", v, (), (Dep("nvidia-kmod", "EQ", v),)) for v in (pin, new)),
    ]  # fmt: skip
    want = [Want("cuda-drivers", ("570.195.03-*",))]
    driver_pin = Pin(("*nvidia*", "cuda-drivers*"), ("570.195.03-*",))
    held = resolve_rpm(RpmIndex.build(pkgs), want, [driver_pin])
    assert {n: p.version for n, p in held.selected.items()} == {
        "cuda-drivers": "570.195.03-1",
        "nvidia-driver-cuda": "3:570.195.03-1.el9",
        "kmod-nvidia-latest-dkms": "3:570.195.03-1.el9",  # a provider of nvidia-kmod, by its version
    }
    for pins in ([], [Pin(("datacenter-gpu-manager-4-*",), ("570.195.03-*",))]):  # none, or not these names
        newest = resolve_rpm(RpmIndex.build(pkgs), want, pins)
        assert newest.selected["nvidia-driver-cuda"].version == "3:570.211.01-1.el9"
        assert newest.selected["kmod-nvidia-latest-dkms"].version == "3:570.211.01-1.el9"
