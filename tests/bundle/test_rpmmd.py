"""rpm-md reading, writing and resolution: data in, exact results out (no tools needed)."""

from __future__ import annotations

import bz2
import gzip
import lzma
from pathlib import Path

import pytest
import yaml
import zstandard

from gpuforge.bundle.resolve import Want
from gpuforge.bundle.rpm_resolve import RpmIndex, hidden_by_modules, resolve_rpm
from gpuforge.bundle.rpmmd import (
    Dep,
    Evr,
    MetadataError,
    RpmPackage,
    evr_cmp,
    filter_metadata,
    filter_modules,
    module_artifacts,
    parse_primary,
    parse_repomd,
    rpmvercmp,
)


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [  # each checked with rpm 4.18 itself: rpm --eval "%{lua: print(rpm.vercmp('A', 'B'))}"
        ("1.0", "1.0", 0),
        ("1.0", "2.0", -1),
        ("2.0.1", "2.0.1a", -1),
        ("5.5p1", "5.5p10", -1),
        ("10xyz", "10.1xyz", -1),
        ("xyz10", "xyz10.1", -1),
        ("1.0", "1.0a", -1),
        ("a", "1", -1),
        ("1.0~rc1", "1.0", -1),
        ("1.0~rc1", "1.0~rc2", -1),
        ("1.0~rc1~git123", "1.0~rc1", -1),
        ("1.0^", "1.0", 1),
        ("1.0^git1", "1.0.1", -1),
        ("1.0^git1", "1.0^git2", -1),
        ("550.163.01", "550.54.15", 1),
        ("575.57.08", "550.163.01", 1),
        ("1.el9", "1.el9_4", -1),
        ("1.0^git1", "1.0", 1),
        ("1.0^git1~pre", "1.0^git1", -1),
        ("1.0^", "1.0~", 1),
    ],
)
def test_rpmvercmp(a: str, b: str, want: int) -> None:
    assert rpmvercmp(a, b) == want
    assert rpmvercmp(b, a) == -want


def test_evr_order_epoch_first_release_only_where_both_name_one() -> None:
    assert evr_cmp(Evr(1, "4.2.3", "1"), Evr(0, "9.9", "9")) == 1
    assert evr_cmp(Evr(3, "550.163.01", "1.el9"), Evr(3, "550.163.01", None)) == 0
    assert evr_cmp(Evr(3, "550.163.01", "2.el9"), Evr(3, "550.163.01", "1.el9")) == 1


def test_dep_matching() -> None:
    want = Dep("nvidia-driver", "EQ", Evr(3, "550.163.01", "1.el9"))
    assert want.matched_by(Evr(3, "550.163.01", "1.el9"))
    assert not want.matched_by(Evr(3, "550.144.03", "1.el9"))
    assert want.matched_by(None)  # an unversioned provide satisfies any version (rpm's rule)
    ge = Dep("libnvidia-container1(x86-64)", "GE", Evr(0, "1.17.8", "1"))
    assert ge.matched_by(Evr(0, "1.18.0", "1")) and not ge.matched_by(Evr(0, "1.17.7", "1"))
    assert str(want) == "nvidia-driver = 3:550.163.01-1.el9"


REPOMD = b"""<?xml version="1.0" encoding="UTF-8"?>
<repomd xmlns="http://linux.duke.edu/metadata/repo" xmlns:rpm="http://linux.duke.edu/metadata/rpm">
  <data type="primary">
    <checksum type="sha256">aa</checksum>
    <location href="repodata/aa-primary.xml.gz"/>
    <size>10</size>
  </data>
  <data type="modules">
    <checksum type="sha256">bb</checksum>
    <location href="repodata/bb-modules.yaml.xz"/>
  </data>
</repomd>
"""


def test_repomd_lists_metadata_files_inside_repodata_only() -> None:
    md = parse_repomd(REPOMD)
    assert md["primary"].href == "repodata/aa-primary.xml.gz" and md["primary"].size == 10
    assert md["modules"].checksum == "bb" and md["modules"].size is None
    with pytest.raises(MetadataError, match="not a file in repodata/"):
        parse_repomd(REPOMD.replace(b"repodata/aa-primary", b"repodata/../../etc/aa-primary"))
    with pytest.raises(MetadataError, match="no primary"):
        parse_repomd(REPOMD.replace(b'type="primary"', b'type="other"'))
    with pytest.raises(MetadataError, match="not XML"):
        parse_repomd(b"<repomd")


PRIMARY = b"""<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="2">
<package type="rpm">
  <name>nvidia-driver</name>
  <arch>x86_64</arch>
  <version epoch="3" ver="550.163.01" rel="1.el9"/>
  <checksum type="sha256" pkgid="YES">p1</checksum>
  <location xml:base="http://elsewhere.example/" href="Packages/n/nvidia-driver-550.163.01-1.el9.x86_64.rpm"/>
  <size package="5669" installed="0" archive="124"/>
  <format>
    <rpm:provides>
      <rpm:entry name="nvidia-driver" flags="EQ" epoch="3" ver="550.163.01" rel="1.el9"/>
    </rpm:provides>
    <rpm:requires>
      <rpm:entry name="nvidia-driver-libs(x86-64)" flags="EQ" epoch="3" ver="550.163.01" rel="1.el9"/>
      <rpm:entry name="/usr/sbin/nvidia-modprobe"/>
    </rpm:requires>
    <file>/usr/bin/nvidia-smi</file>
  </format>
</package>
<package type="rpm">
  <name>other</name>
  <arch>noarch</arch>
  <version epoch="0" ver="1" rel="1"/>
  <checksum type="sha256" pkgid="YES">p2</checksum>
  <location href="other-1-1.noarch.rpm"/>
  <format/>
</package>
</metadata>
"""


def test_primary_is_read_and_reduced_with_local_locations() -> None:
    pkgs = parse_primary(PRIMARY)
    drv = pkgs[0]
    assert (drv.name, drv.version, drv.nevra) == (
        "nvidia-driver",
        "3:550.163.01-1.el9",
        "nvidia-driver-3:550.163.01-1.el9.x86_64",
    )
    assert drv.size == 5669 and drv.files == ("/usr/bin/nvidia-smi",)
    assert [str(d) for d in drv.requires] == [
        "nvidia-driver-libs(x86-64) = 3:550.163.01-1.el9",
        "/usr/sbin/nvidia-modprobe",
    ]
    reduced = filter_metadata("primary", PRIMARY, {"p1": "nvidia-driver-550.163.01-1.el9.x86_64.rpm"})
    again = parse_primary(reduced)
    assert [p.name for p in again] == ["nvidia-driver"]
    assert again[0].href == "nvidia-driver-550.163.01-1.el9.x86_64.rpm"  # xml:base gone: the bundle's own file
    assert again[0].requires == drv.requires
    assert b'packages="1"' in reduced and b"<rpm:entry" in reduced  # the rpm: prefix libsolv matches by name


def test_metadata_files_are_read_by_their_suffix(tmp_path: Path) -> None:
    for name, data in (
        ("a-primary.xml.gz", gzip.compress(PRIMARY)),
        ("b-primary.xml.xz", lzma.compress(PRIMARY)),
        ("c-primary.xml.bz2", bz2.compress(PRIMARY)),
        ("d-primary.xml", PRIMARY),
        ("g-primary.xml.zst", zstandard.ZstdCompressor().compress(PRIMARY)),  # createrepo_c >= 1.0 can write it
    ):
        (tmp_path / name).write_bytes(data)
        assert [p.name for p in parse_primary(tmp_path / name)] == ["nvidia-driver", "other"], name
    (tmp_path / "e-primary.xml.zck").write_bytes(b"\x00ZCK1")
    with pytest.raises(MetadataError, match="zchunk"):
        parse_primary(tmp_path / "e-primary.xml.zck")
    (tmp_path / "h-primary.xml.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage")
    with pytest.raises(MetadataError, match="cannot decompress"):
        parse_primary(tmp_path / "h-primary.xml.zst")
    (tmp_path / "f-primary.xml.gz").write_bytes(b"not gzip")
    with pytest.raises(MetadataError, match="cannot decompress"):
        parse_primary(tmp_path / "f-primary.xml.gz")


def pkg(
    name: str, evr: Evr, requires: tuple[Dep, ...] = (), provides: tuple[Dep, ...] = (), files: tuple[str, ...] = ()
) -> RpmPackage:
    own = Dep(name, "EQ", evr)
    return RpmPackage(
        name, "x86_64", evr, f"id-{name}-{evr}", "sha256", f"{name}.rpm", None, (own, *provides), requires, files
    )


def _v(ver: str) -> Evr:
    return Evr(3, ver, "1.el9")


def driver(ver: str) -> list[RpmPackage]:
    return [
        pkg("nvidia-open", _v(ver), (Dep("nvidia-driver", "EQ", _v(ver)), Dep("dkms"))),
        pkg(
            "nvidia-driver",
            _v(ver),
            (Dep("nvidia-kmod-common", "GE", Evr(3, "550", None)), Dep("/usr/sbin/nvidia-modprobe")),
        ),
        pkg("nvidia-kmod-common", _v(ver)),
        pkg("nvidia-modprobe", _v(ver), files=("/usr/sbin/nvidia-modprobe",)),
    ]


def test_resolution_follows_dnf_modular_filtering() -> None:
    """With nvidia-driver:550-open enabled, the 575 stream's packages are hidden: a ">= 550"
    requirement takes the 550 package dnf would, not the newest in the repository."""
    pkgs = driver("550.163.01") + driver("575.57.08")
    artifacts = {
        ("nvidia-driver", "550-open"): {p.nevra for p in pkgs if p.evr.ver.startswith("550")},
        ("nvidia-driver", "575-open"): {p.nevra for p in pkgs if p.evr.ver.startswith("575")},
    }
    hidden = hidden_by_modules(artifacts, {("nvidia-driver", "550-open")})
    res = resolve_rpm(RpmIndex.build(pkgs, hidden), [Want("nvidia-open", ("550.163.01-*",), "driver")])
    assert {n: p.version for n, p in res.selected.items()} == {
        "nvidia-open": "3:550.163.01-1.el9",
        "nvidia-driver": "3:550.163.01-1.el9",
        "nvidia-kmod-common": "3:550.163.01-1.el9",
        "nvidia-modprobe": "3:550.163.01-1.el9",  # by the file it installs
    }
    assert res.required_by["nvidia-modprobe"] == "nvidia-driver"
    assert res.external == {"dkms": {"nvidia-open"}} and res.problems == []
    # Without the module metadata the newest provider of ">= 550" would win: that is what it prevents.
    unfiltered = resolve_rpm(RpmIndex.build(pkgs), [Want("nvidia-open", ("550.163.01-*",))])
    assert unfiltered.selected["nvidia-kmod-common"].version == "3:575.57.08-1.el9"


def test_resolution_problems_name_the_versions_there() -> None:
    pkgs = [pkg("a", _v("1"), (Dep("b", "EQ", _v("2")),)), pkg("b", _v("1"))]
    res = resolve_rpm(RpmIndex.build(pkgs), [Want("a"), Want("c", ("9*",))])
    assert res.problems == [
        "c 9* is not in the repository (versions there: none)",
        "a 3:1-1.el9 requires b = 3:2-1.el9: the repository has 3:1-1.el9",
    ]


def test_rpmlib_and_rich_requirements_are_left_to_the_node() -> None:
    rich = Dep("(nvidia-kmod-common if kernel)")
    pkgs = [pkg("a", _v("1"), (Dep("rpmlib(PayloadIsZstd)", "LE", Evr(0, "5.4.18", "1")), rich))]
    res = resolve_rpm(RpmIndex.build(pkgs), [Want("a")])
    assert list(res.selected) == ["a"] and res.external == {} and res.problems == []


MODULES = [
    {
        "document": "modulemd",
        "version": 2,
        "data": {"name": "nvidia-driver", "stream": "550-open", "artifacts": {"rpms": ["a-3:1-1.x86_64"]}},
    },
    {
        "document": "modulemd",
        "version": 2,
        "data": {"name": "nvidia-driver", "stream": "575-open", "artifacts": {"rpms": ["a-3:2-1.x86_64"]}},
    },
    {"document": "modulemd-defaults", "version": 1, "data": {"module": "nvidia-driver", "stream": "575-open"}},
    {"document": "modulemd-defaults", "version": 1, "data": {"module": "other", "stream": "x"}},
]


def test_modules_keep_the_enabled_streams_and_their_defaults() -> None:
    data = yaml.safe_dump_all(MODULES, explicit_start=True).encode()
    assert module_artifacts(data) == {
        ("nvidia-driver", "550-open"): {"a-3:1-1.x86_64"},
        ("nvidia-driver", "575-open"): {"a-3:2-1.x86_64"},
    }
    kept = filter_modules(data, {("nvidia-driver", "550-open")})
    assert kept is not None
    docs = list(yaml.safe_load_all(kept))
    assert docs == [MODULES[0], MODULES[2]]
    assert filter_modules(data, {("nvidia-driver", "590-open")}) is None
