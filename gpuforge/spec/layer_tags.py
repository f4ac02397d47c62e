"""``--tags`` and ``--skip-tags`` (Ansible's names): the layers one plan or apply runs.

A tag is a layer as the deploys name it (``gpuforge.spec.roles.LAYER_ORDER``: base, packages,
munge, nvidia, fabric, kubernetes, slurm, monitoring, health) or ``site``: the site's Ansible steps
(``site.ansible``). ``--tags`` keeps only the layers named, ``--skip-tags`` leaves layers out;
the chosen layers still run in the one global order.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.roles import LAYER_ORDER
from gpuforge.spec.suggest import did_you_mean

#: The tag of the site's Ansible steps.
SITE_TAG = "site"
#: Every tag, in the order the run walks them.
TAGS: tuple[str, ...] = (*LAYER_ORDER, SITE_TAG)


class TagError(ValueError):
    """A ``--tags``/``--skip-tags`` value that names an unknown tag, or leaves nothing to run."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"{option}: {message}")


@dataclass(frozen=True)
class LayerSelection:
    """What a run with ``--tags``/``--skip-tags`` runs: these layers (in the global order), and the
    site's Ansible steps or not."""

    layers: tuple[str, ...]
    site_steps: bool

    @property
    def tags(self) -> list[str]:
        return [*self.layers, *([SITE_TAG] if self.site_steps else [])]

    def describe(self) -> str:
        """``layers slurm, monitoring`` (and ``site steps``), for messages and the run log."""
        return ", ".join(self.tags)


def _parse(option: str, text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise TagError(option, f"names no tag; the tags: {', '.join(TAGS)}")
    for name in names:
        if name not in TAGS:
            hint = did_you_mean(name, TAGS)
            raise TagError(option, f"unknown tag {name!r}; {f'{hint} ' if hint else ''}the tags: {', '.join(TAGS)}")
    return names


def select_layers(tags: str | None, skip_tags: str | None) -> LayerSelection | None:
    """The selection ``--tags``/``--skip-tags`` make (comma-separated tags); None when neither is
    given: every layer and the site's steps, as a run without them. Raises :class:`TagError`."""
    if tags is None and skip_tags is None:
        return None
    wanted = set(_parse("--tags", tags)) if tags is not None else set(TAGS)
    skipped = set(_parse("--skip-tags", skip_tags)) if skip_tags is not None else set()
    chosen = [t for t in TAGS if t in wanted and t not in skipped]
    if not chosen:
        option = "--skip-tags" if skip_tags is not None else "--tags"
        raise TagError(option, "leaves nothing to run")
    return LayerSelection(tuple(t for t in chosen if t != SITE_TAG), SITE_TAG in chosen)
