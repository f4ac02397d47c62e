"""Hostlist expressions: examples, errors, and hypothesis properties of expand/compress."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from gpuforge.spec.hostlist import HostlistError, compress, expand, split_top_level

HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")

# --------------------------------------------------------------------------- examples


def test_expand_keeps_zero_padding() -> None:
    names = expand("gpu[001-064]")
    assert len(names) == 64
    assert names[0] == "gpu001"
    assert names[9] == "gpu010"
    assert names[-1] == "gpu064"
    assert compress(names) == "gpu[001-064]"


def test_expand_lists_and_ranges_in_order() -> None:
    assert expand("node[1-3,7],login01") == ["node1", "node2", "node3", "node7", "login01"]
    assert expand("b1,a1") == ["b1", "a1"]


def test_expand_drops_repeats() -> None:
    assert expand("a[1-3],a2,a[2-4]") == ["a1", "a2", "a3", "a4"]


def test_expand_multi_bracket() -> None:
    assert expand("a[1-2]b[1-2]") == ["a1b1", "a1b2", "a2b1", "a2b2"]
    assert expand("rack[1-2]-gpu[01-02]") == ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]
    assert expand("n[1-2]-ib") == ["n1-ib", "n2-ib"]
    assert set(expand(compress(expand("a[1-2]b[1-2]")))) == {"a1b1", "a1b2", "a2b1", "a2b2"}


def test_expand_plain_names_and_spaces() -> None:
    assert expand("login") == ["login"]
    assert expand(" a , b ") == ["a", "b"]


def test_padded_range_grows_past_its_width() -> None:
    names = expand("n[098-101]")
    assert names == ["n098", "n099", "n100", "n101"]
    assert compress(names) == "n[098-101]"
    assert expand("n[01-100]")[-2:] == ["n99", "n100"]


def test_compress_examples() -> None:
    assert compress([]) == ""
    assert compress(["gpu1"]) == "gpu1"
    assert compress(["gpu3", "gpu1", "gpu2", "gpu2"]) == "gpu[1-3]"
    assert compress(["n1", "n2", "n3", "n7", "n9", "n10"]) == "n[1-3,7,9-10]"
    assert compress(["gpu099", "gpu100"]) == "gpu[099-100]"
    assert compress(["login", "ctl01", "gpu001", "gpu002"]) == "ctl01,gpu[001-002],login"
    assert compress(["a05", "a5"]) == "a05,a5"


def test_compress_keeps_different_widths_apart() -> None:
    names = ["n1", "n01", "n001"]
    assert sorted(expand(compress(names))) == sorted(names)


def test_split_top_level_ignores_commas_in_brackets() -> None:
    assert split_top_level("a[1,2],b,c[3-4,6]") == ["a[1,2]", "b", "c[3-4,6]"]


BAD = [
    ("gpu[1-4", "unbalanced '['"),
    ("gpu1-4]", "unbalanced ']'"),
    ("gpu[1-2]]", "unbalanced ']'"),
    ("gpu[9-2]", "runs backwards"),
    ("gpu[a-b]", "is not numeric"),
    ("gpu[x]", "is not numeric"),
    ("gpu[1 - 3]", "is not numeric"),
    ("gpu[]", "empty range item"),
    ("gpu[1,,2]", "empty range item"),
    ("a,,b", "empty item"),
    ("a,", "empty item"),
    ("bad name", "invalid host name"),
    ("bad/name", "invalid host name"),
    ("ba!d[1-2]", "invalid host name part"),
    ("gpu[0-200000]", "stands for 200,001 names; 10,000 at most"),
    ("a[[1]]", "hostlist 'a[[1]]'"),
]


@pytest.mark.parametrize(("expr", "why"), BAD, ids=[b[0] for b in BAD])
def test_bad_expressions_name_the_expression(expr: str, why: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(expr)
    assert why in str(info.value)
    assert repr(expr) in str(info.value), "the message names the whole expression"


@pytest.mark.parametrize("expr", ["", "   "])
def test_empty_hostlist(expr: str) -> None:
    with pytest.raises(HostlistError, match="empty hostlist"):
        expand(expr)


def test_hostlist_error_is_a_value_error() -> None:
    """pydantic turns ValueError from a validator into a field error."""
    assert issubclass(HostlistError, ValueError)


def test_non_ascii_digit_in_range_is_a_hostlist_error() -> None:
    with pytest.raises(HostlistError):
        expand("n[1-\u00b2]")


@pytest.mark.parametrize("expr", ["n[\u0663]", "n\u0663", "n[1-\u0663]", "n[\u0661\u0662]"])
def test_non_ascii_digits_are_refused(expr: str) -> None:
    """Host names are ASCII (RFC 1123): an Arabic-Indic digit is no digit here, in a range or a name."""
    with pytest.raises(HostlistError, match="hostlist"):
        expand(expr)


# --------------------------------------------------------------------------- properties

# Host names as a site would write them (RFC 1123 labels): a prefix (letters, digits, '-'), usually a
# number, sometimes zero-padded, sometimes a plain name. A prefix that ends in a digit runs
# into the number ("a0" + "12" = "a012"): compress must cope with whatever comes out.
prefixes = st.text(alphabet="abgpu-0", min_size=0, max_size=4)
numbers = st.one_of(
    st.just(""),
    st.integers(0, 1200).map(str),
    st.tuples(st.integers(0, 1200), st.integers(1, 5)).map(lambda t: str(t[0]).zfill(t[1])),
)
host_names = st.builds(lambda p, n: p + n, prefixes, numbers).filter(lambda n: bool(HOST_NAME.fullmatch(n)))
name_lists = st.lists(host_names, max_size=40)

# Realistic clusters: a few prefixes with dense runs of (padded) numbers.
cluster_names = st.lists(
    st.tuples(
        st.sampled_from(["gpu", "node", "n", "rack1-n", "cpu-"]), st.integers(0, 150), st.sampled_from([0, 2, 3])
    ),
    max_size=120,
).map(lambda items: [p + str(n).zfill(w) for p, n, w in items])


@given(name_lists)
@example(["gpu099", "gpu100"])
@example(["n9", "n10", "n09"])
@example(["a0", "a00", "a000", "a1"])
@example(["007", "7", "8"])
@example(["a1b1", "a1b2", "a2b1"])
def test_expand_compress_round_trip(names: list[str]) -> None:
    assume(names)
    expr = compress(names)
    expanded = expand(expr)
    assert set(expanded) == set(names)
    assert len(expanded) == len(set(names)), "no name twice"


@given(cluster_names)
def test_round_trip_realistic(names: list[str]) -> None:
    assume(names)
    assert sorted(expand(compress(names))) == sorted(set(names))


@given(name_lists)
def test_compress_is_canonical(names: list[str]) -> None:
    """Whatever the input order or repeats, one set of names has one expression."""
    assume(names)
    expr = compress(names)
    assert compress(expand(expr)) == expr
    shuffled = names * 2
    random.Random(0).shuffle(shuffled)
    assert compress(shuffled) == expr


@given(cluster_names)
def test_compress_is_idempotent_on_its_own_output(names: list[str]) -> None:
    assume(names)
    once = compress(names)
    twice = compress(expand(once))
    assert twice == once
    assert compress(expand(twice)) == once


@given(st.text(alphabet="ab1-9[],- 0", max_size=20))
def test_expand_fails_only_with_hostlist_error(expr: str) -> None:
    """Any expression either expands or raises HostlistError naming it; nothing else escapes."""
    try:
        names = expand(expr)
    except HostlistError as e:
        assert expr.strip() == "" or repr(expr) in str(e) or repr(expr.strip()) in str(e)
        return
    assert names
    assert set(expand(compress(names))) == set(names)
