"""Median and MAD per (group, step, metric); who is below the margin and beyond the robust threshold."""

from __future__ import annotations

import pytest

from gpuforge.acceptance import outliers, parsers
from gpuforge.spec.acceptance import Outliers
from tests.acceptance.conftest import record_of

DEFAULT = Outliers()


def test_median_and_mad() -> None:
    assert outliers.median_mad([1.0, 2.0, 3.0, 4.0, 100.0]) == (3.0, 1.0)
    assert outliers.median_mad([5.0]) == (5.0, 0.0)


def test_recorded_throttled_node_is_the_outlier_with_figure_and_median() -> None:
    """Three real stress-ng runs (tests/acceptance/fixtures): two free, one in a 20% CPU quota."""
    rate = {n: parsers.judge_stress("cpu", record_of(f"stress_cpu1_{f}.json"), "cpu", None).metrics["bogo_ops_per_s"]
            for n, f in (("node1", "a"), ("node2", "b"), ("node3", "slow"))}  # fmt: skip
    stats, found = outliers.compare({("batch", "cpu", "bogo_ops_per_s"): rate}, DEFAULT)
    assert [o.node for o in found] == ["node3"]
    o = found[0]
    assert (o.value, o.median) == (457.97, 2142.64)
    assert o.below_percent == pytest.approx(100 * (2142.64 - 457.97) / 2142.64)
    assert "457.97" in o.text() and "median 2142.64" in o.text()
    assert stats[0].count == 3 and stats[0].mad == pytest.approx(2142.64 - 2142.64 + 47.65, abs=0.01)


def test_ordinary_spread_is_not_flagged() -> None:
    """11% below the median but within the group's own spread (MAD test) is not an outlier."""
    figures = {"a": 100.0, "b": 89.0, "c": 112.0, "d": 95.0, "e": 104.0, "f": 80.0, "g": 120.0}
    _, found = outliers.compare({("g", "cpu", "x"): figures}, DEFAULT)
    assert found == []


def test_tight_group_flags_only_beyond_the_margin() -> None:
    """All equal but one 5% lower: MAD 0, the margin (10%) decides: not flagged; 20% lower: flagged."""
    same = {f"n{i}": 1000.0 for i in range(6)}
    assert outliers.compare({("g", "s", "m"): {**same, "x": 950.0}}, DEFAULT)[1] == []
    found = outliers.compare({("g", "s", "m"): {**same, "x": 800.0}}, DEFAULT)[1]
    assert [(o.node, o.deviations) for o in found] == [("x", None)]


def test_high_figures_are_never_outliers() -> None:
    _, found = outliers.compare({("g", "s", "m"): {"a": 100.0, "b": 101.0, "c": 99.0, "d": 400.0}}, DEFAULT)
    assert found == []


def test_small_groups_are_not_compared() -> None:
    three = {"a": 100.0, "b": 101.0, "c": 10.0}
    assert [o.node for o in outliers.compare({("g", "s", "m"): three}, DEFAULT)[1]] == ["c"]
    assert outliers.compare({("g", "s", "m"): three}, Outliers(min_group=4))[1] == []
    # two figures cannot say which one is typical: half the gap is one MAD, never beyond the threshold
    assert outliers.compare({("g", "s", "m"): {"a": 100.0, "b": 10.0}}, Outliers(min_group=2))[1] == []


def test_groups_and_steps_are_compared_separately() -> None:
    figures = {
        ("leaf1", "cpu", "r"): {"a": 100.0, "b": 100.0, "c": 100.0},
        ("leaf2", "cpu", "r"): {"d": 50.0, "e": 50.0, "f": 49.0},
    }
    stats, found = outliers.compare(figures, DEFAULT)
    assert found == [] and [s.median for s in stats] == [100.0, 50.0]


def test_margin_is_configurable() -> None:
    figures = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 93.0}
    assert outliers.compare({("g", "s", "m"): figures}, Outliers(margin_percent=5))[1][0].node == "d"
    assert outliers.compare({("g", "s", "m"): figures}, Outliers(margin_percent=10))[1] == []


def test_band_is_median_plus_minus_scaled_mad() -> None:
    st = outliers.stats_of("g", "s", "m", {"a": 1.0, "b": 2.0, "c": 3.0})
    assert st.band == pytest.approx((2.0 - 1.4826, 2.0 + 1.4826))
