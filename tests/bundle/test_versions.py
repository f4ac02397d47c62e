"""Debian version comparison (dpkg's algorithm) and dependency relations."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from gpuforge.bundle.debian import Relation, parse_relations, split_version, version_compare, version_satisfies

# (a, b, sign of compare(a, b)): dpkg's own examples and Debian policy 5.6.12.
TABLE = [
    ("1.0", "1.0", 0),
    ("0:1.0", "1.0", 0),  # epoch 0 is the default
    ("1.0", "1.0-0", 0),  # no revision equals revision 0
    ("1.002", "1.2", 0),  # numeric parts compare as numbers
    ("1.0~rc1", "1.0", -1),  # tilde sorts before everything, even the end
    ("1.0~~", "1.0~~a", -1),
    ("1.0~~a", "1.0~", -1),
    ("1.0~", "1.0", -1),
    ("1.0", "1.0a", -1),
    ("1.0", "1.0+b1", -1),
    ("1.0a", "1.0+", -1),  # letters sort before non-letters
    ("1.0a", "1.0b", -1),
    ("1.0-1", "1.0-2", -1),
    ("1.0-1~bpo1", "1.0-1", -1),
    ("1.0-9", "1.0-10", -1),  # revisions compare numerically too
    ("1.2", "1.10", -1),
    ("2.0", "10.0", -1),
    ("1.0", "1.0.1", -1),
    ("1.0-beta-2", "1.0-beta-10", -1),  # upstream may hold hyphens: the revision is after the last
    ("9.9", "1:0.1", -1),  # a higher epoch wins over everything
    ("1:4.2.3-1", "4.3.0-1", 1),
    ("1:4.2.3-1", "1:4.3.0-1", -1),
    ("1.17.8-1", "1.18.0-1", -1),
    ("1.17.10-1", "1.17.8-1", 1),
    ("550.163.01-0ubuntu1", "550.163.01-0ubuntu1.24.04.1", -1),
    ("550.144.03-0ubuntu1", "550.163.01-0ubuntu1", -1),
    ("2.36-9+deb12u10", "2.36-9+deb12u9", 1),
    ("a", "b", -1),
    ("1a", "1+", -1),
    ("1.0.", "1.0", 1),
]


@pytest.mark.parametrize(("a", "b", "want"), TABLE)
def test_version_compare(a: str, b: str, want: int) -> None:
    assert version_compare(a, b) == want
    assert version_compare(b, a) == -want


def test_split_version() -> None:
    assert split_version("1:4.2.3-1") == (1, "4.2.3", "1")
    assert split_version("1.0") == (0, "1.0", "")
    assert split_version("1.0-beta-2") == (0, "1.0-beta", "2")
    assert split_version("2:1:0-1") == (2, "1:0", "1")


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
def test_agrees_with_dpkg() -> None:
    """Random versions: the same order as ``dpkg --compare-versions``."""
    rng = random.Random(20250101)
    alphabet = "0123456789" * 3 + "abz.+~"

    def part() -> str:
        return rng.choice("0123456789") + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))

    def version() -> str:
        v = part()
        if rng.random() < 0.3:
            v = f"{rng.randint(0, 2)}:{v}"
        if rng.random() < 0.6:
            v += "-" + part()
        return v

    pairs = [(version(), version()) for _ in range(150)]
    pairs += [(a, b) for a, b, _ in TABLE]
    for a, b in pairs:
        ours = version_compare(a, b)
        for op, holds in (("lt", ours < 0), ("eq", ours == 0), ("gt", ours > 0)):
            rc = subprocess.run(["dpkg", "--compare-versions", a, op, b], capture_output=True).returncode
            assert (rc == 0) == holds, f"{a} {op} {b}: dpkg says {rc == 0}"


@pytest.mark.parametrize(
    ("version", "op", "wanted", "ok"),
    [
        ("1.17.8-1", "=", "1.17.8-1", True),
        ("1.17.8-1", ">=", "1.17.8", True),
        ("1.17.7-1", ">=", "1.17.8", False),
        ("1.17.8-1", "<<", "1.17.8-2", True),
        ("1.17.8-2", "<<", "1.17.8-2", False),
        ("1.17.8-2", "<=", "1.17.8-2", True),
        ("1.17.9", ">>", "1.17.8-1", True),
        ("1:4.2.3-1", "=", "1:4.2.3-1", True),
        ("1:4.2.3-1", "=", "4.2.3-1", False),
        ("1.0", "<", "1.0", True),  # obsolete spelling of <=
        ("1.0", ">", "1.0", True),  # obsolete spelling of >=
        ("1.0", None, None, True),
    ],
)
def test_version_satisfies(version: str, op: str | None, wanted: str | None, ok: bool) -> None:
    assert version_satisfies(version, op, wanted) is ok


def test_parse_relations() -> None:
    text = (
        "libc6 (>= 2.34), nvidia-container-toolkit-base (= 1.17.8-1),\n"
        " libseccomp2 | libcap2 (>>2.0), python3:any (>= 3.9~), foo [i386], bar [!i386] | baz [amd64]"
    )
    assert parse_relations(text) == [
        [Relation("libc6", ">=", "2.34")],
        [Relation("nvidia-container-toolkit-base", "=", "1.17.8-1")],
        [Relation("libseccomp2"), Relation("libcap2", ">>", "2.0")],
        [Relation("python3", ">=", "3.9~")],
        [Relation("bar"), Relation("baz")],
    ]
    assert str(Relation("libc6", ">=", "2.34")) == "libc6 (>= 2.34)"
    assert parse_relations("") == []
