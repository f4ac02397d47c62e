"""What the RHEL bundle's metadata work costs: reading a large upstream primary, resolving, reducing.

NVIDIA's CUDA repository for rhel9 carries every driver branch and CUDA release side by side, so its
``primary`` and ``filelists`` are large. This writes synthetic ones of N packages in createrepo_c's
layout (each package with provides, requires and files), gzip-compressed as upstream serves them,
then times, in a fresh process per N: parsing primary (streamed from the .gz), resolving a driver
metapackage with its closure, and reducing primary and filelists to the chosen packages. Prints a
table with the peak RSS of each process.

    python bench/rpm_metadata.py [--packages 2000,10000,40000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRIMARY_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<metadata xmlns="http://linux.duke.edu/metadata/common" '
    'xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="{n}">\n'
)
FILELISTS_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<filelists xmlns="http://linux.duke.edu/metadata/filelists" packages="{n}">\n'
)


def _package(i: int) -> tuple[str, str]:
    """(primary entry, filelists entry) of synthetic package i: 50 driver releases of 20 packages each,
    the rest CUDA-toolkit-like packages with 40 files each."""
    if i < 1000:
        rel, name = divmod(i, 20)
        ver = f"550.{rel}.01"
        pkg = "nvidia-open" if name == 0 else f"nvidia-part{name}"
        req = (
            f'<rpm:entry name="nvidia-part{name + 1}" flags="EQ" epoch="3" ver="{ver}" rel="1.el9"/>'
            if name < 19
            else ""
        )
    else:
        ver, pkg, req = "12.8.1", f"cuda-lib{i}", '<rpm:entry name="libc.so.6()(64bit)"/>'
    pid = f"{i:064x}"
    files = "".join(f"<file>/usr/local/cuda/lib{i}/f{j}.so</file>" for j in range(40))
    primary = (
        f'<package type="rpm"><name>{pkg}</name><arch>x86_64</arch><version epoch="3" ver="{ver}" rel="1.el9"/>'
        f'<checksum type="sha256" pkgid="YES">{pid}</checksum><summary>s</summary><description>d</description>'
        f'<location href="{pkg}-{ver}-1.el9.x86_64.rpm"/><size package="1000" installed="0" archive="0"/>'
        f'<format><rpm:provides><rpm:entry name="{pkg}" flags="EQ" epoch="3" ver="{ver}" rel="1.el9"/>'
        f'<rpm:entry name="{pkg}(x86-64)" flags="EQ" epoch="3" ver="{ver}" rel="1.el9"/></rpm:provides>'
        f"<rpm:requires>{req}</rpm:requires><file>/usr/bin/{pkg}</file></format></package>\n"
    )
    version = f'<version epoch="3" ver="{ver}" rel="1.el9"/>'
    filelists = f'<package pkgid="{pid}" name="{pkg}" arch="x86_64">{version}{files}</package>\n'
    return primary, filelists


def write_metadata(n: int, where: Path) -> tuple[Path, Path]:
    primary, filelists = where / "primary.xml.gz", where / "filelists.xml.gz"
    with gzip.open(primary, "wt") as p, gzip.open(filelists, "wt") as f:
        p.write(PRIMARY_HEAD.format(n=n))
        f.write(FILELISTS_HEAD.format(n=n))
        for i in range(n):
            a, b = _package(i)
            p.write(a)
            f.write(b)
        p.write("</metadata>\n")
        f.write("</filelists>\n")
    return primary, filelists


def measure(primary: Path, filelists: Path) -> dict[str, float]:
    """In this process: parse, resolve, reduce (the bundle's steps for one repository)."""
    from gpuforge.bundle.resolve import Want
    from gpuforge.bundle.rpm_resolve import RpmIndex, resolve_rpm
    from gpuforge.bundle.rpmmd import filter_metadata, parse_primary

    t0 = time.perf_counter()
    packages = parse_primary(primary)
    t1 = time.perf_counter()
    res = resolve_rpm(RpmIndex.build(packages), [Want("nvidia-open", ("550.42.01-*",))])
    t2 = time.perf_counter()
    hrefs = {p.pkgid: p.href for p in res.selected.values()}
    out = len(filter_metadata("primary", primary, hrefs)) + len(filter_metadata("filelists", filelists, hrefs))
    t3 = time.perf_counter()
    return {
        "parse_s": t1 - t0,
        "resolve_s": t2 - t1,
        "reduce_s": t3 - t2,
        "selected": len(res.selected),
        "written_bytes": out,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", default="2000,10000,40000")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), Path(args.child[1]))))
        return 0
    cols = ("packages", "primary.gz", "filelists.gz", "parse s", "resolve s", "reduce s", "chosen", "peak RSS MB")
    widths = (9, 11, 13, 8, 10, 9, 7, 12)
    print(" ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True)))
    for n in (int(x) for x in args.packages.split(",")):
        with tempfile.TemporaryDirectory(prefix="gpuforge-bench-rpm-") as tmp:
            primary, filelists = write_metadata(n, Path(tmp))
            cp = subprocess.run(
                [sys.executable, __file__, "--child", str(primary), str(filelists)],
                capture_output=True, text=True, check=True, cwd=REPO,
            )  # fmt: skip
            r = json.loads(cp.stdout)
            sizes = f"{primary.stat().st_size / 2**20:>9.1f}MB {filelists.stat().st_size / 2**20:>11.1f}MB"
            times = f"{r['parse_s']:>8.2f} {r['resolve_s']:>10.3f} {r['reduce_s']:>9.2f}"
            print(f"{n:>9} {sizes} {times} {r['selected']:>7} {r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
