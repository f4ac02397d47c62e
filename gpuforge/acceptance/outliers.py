"""Peer comparison: the nodes that pass every check but run slower than their group.

For every numeric metric of every (group, step), the median and the median absolute deviation
(MAD) of the nodes that have the figure. A node is an outlier when its figure is

* more than ``margin_percent`` below the median: ``value < median * (1 - margin/100)``, and
* beyond ``mad_threshold`` robust deviations: ``(median - value) / (1.4826 * MAD) > threshold``
  (1.4826 MAD estimates the standard deviation of normal data); with MAD 0 (most nodes equal) the
  margin alone decides.

Both conditions guard against a different noise: the margin against flagging a tight group's
tiny differences, the MAD test against flagging a noisy group's ordinary spread. Groups with
fewer than ``min_group`` figures are not compared (too few to tell who is typical). Every metric
is "higher is better" (:mod:`.parsers`): only the low side is flagged. Pure functions.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from gpuforge.spec.acceptance import Outliers

MAD_SCALE = 1.4826


@dataclass(frozen=True)
class GroupStats:
    """One metric of one (group, step): the figures compared."""

    group: str
    step: str
    metric: str
    median: float
    mad: float
    count: int

    @property
    def band(self) -> tuple[float, float]:
        """The median plus or minus one robust deviation (the report's shaded band)."""
        spread = MAD_SCALE * self.mad
        return self.median - spread, self.median + spread


@dataclass(frozen=True)
class Outlier:
    """A node below its peers: its figure and the median side by side."""

    node: str
    group: str
    step: str
    metric: str
    value: float
    median: float
    below_percent: float
    deviations: float | None

    def text(self) -> str:
        dev = f", {self.deviations:.1f} robust deviations" if self.deviations is not None else ""
        return (
            f"{self.step}.{self.metric} = {self.value:g}, {self.below_percent:.1f}% below the {self.group} median "
            f"{self.median:g}{dev}"
        )


def median_mad(values: list[float]) -> tuple[float, float]:
    """The median and the median absolute deviation of ``values`` (not empty)."""
    med = statistics.median(values)
    return med, statistics.median(abs(v - med) for v in values)


def stats_of(group: str, step: str, metric: str, figures: Mapping[str, float]) -> GroupStats:
    med, mad = median_mad(list(figures.values()))
    return GroupStats(group, step, metric, med, mad, len(figures))


def outliers_of(stats: GroupStats, figures: Mapping[str, float], settings: Outliers) -> list[Outlier]:
    """The nodes of one (group, step, metric) that are outliers (none when the group is too small)."""
    if stats.count < settings.min_group or stats.median <= 0:
        return []
    floor = stats.median * (1 - settings.margin_percent / 100)
    found = []
    for node, value in sorted(figures.items()):
        if value >= floor:
            continue
        deviations = None
        if stats.mad > 0:
            deviations = (stats.median - value) / (MAD_SCALE * stats.mad)
            if deviations <= settings.mad_threshold:
                continue
        below = 100 * (stats.median - value) / stats.median
        found.append(Outlier(node, stats.group, stats.step, stats.metric, value, stats.median, below, deviations))
    return found


def compare(
    figures: Mapping[tuple[str, str, str], Mapping[str, float]], settings: Outliers
) -> tuple[list[GroupStats], list[Outlier]]:
    """``figures[(group, step, metric)][node] = value`` -> every group's statistics and every outlier."""
    all_stats: list[GroupStats] = []
    found: list[Outlier] = []
    for (group, step, metric), per_node in sorted(figures.items()):
        if not per_node:
            continue
        st = stats_of(group, step, metric, per_node)
        all_stats.append(st)
        found.extend(outliers_of(st, per_node, settings))
    return all_stats, found
