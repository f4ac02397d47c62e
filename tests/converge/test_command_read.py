"""A layer's command read (a ``read_paths`` entry with a command) survives copy, deepcopy and pickle."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import pytest

from gpuforge.deploy.facts.layer import CommandRead

READ = CommandRead("helm-release:gpu-operator/gpu-operator", "helm history gpu-operator -o json")


@pytest.mark.parametrize(
    "clone",
    [copy.copy, copy.deepcopy, lambda r: pickle.loads(pickle.dumps(r))]
    + [lambda r, p=p: pickle.loads(pickle.dumps(r, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)],
    ids=["copy", "deepcopy", "pickle"] + [f"pickle-{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)],
)
def test_a_command_read_round_trips(clone: Callable[[CommandRead], CommandRead]) -> None:
    out = clone(READ)
    assert type(out) is CommandRead
    assert out == READ
    assert str(out) == "helm-release:gpu-operator/gpu-operator"
    assert out.command == READ.command


def test_a_round_trip_still_checks_the_key() -> None:
    """``__getnewargs__`` hands the key back to ``__new__``, which validates it again."""
    assert READ.__getnewargs__() == (str(READ), READ.command)
    with pytest.raises(ValueError, match="letters, digits"):
        CommandRead("a b", "true")
