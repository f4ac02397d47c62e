"""pyinfra's global arguments are worked out once per process, not on every operation call."""

from __future__ import annotations

import typing

import pytest
from pyinfra.api import arguments, facts

import gpuforge.deploy.run  # noqa: F401  (installs the cached list)


def test_the_cached_list_is_pyinfras_own_and_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = list(typing.get_type_hints(arguments.AllArguments).items())

    def no_more(*_a: object, **_k: object) -> object:
        raise AssertionError("get_type_hints called again")

    monkeypatch.setattr(arguments, "get_type_hints", no_more)
    first = arguments.all_global_arguments()
    assert first == expected and facts.all_global_arguments() == expected
    first.clear()  # a caller changing its copy changes nobody else's
    assert arguments.all_global_arguments() == expected
