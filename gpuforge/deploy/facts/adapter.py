"""One pyinfra fact for any node reading: ``reading_fact(READING)`` instead of a class per reading.

The fact's ``command`` takes the reading's arguments (same names, same defaults, so pyinfra's
``host.get_fact(Fact, **kwargs)`` and its argument checks work as for a hand-written fact),
``process`` is the reading's parser, and ``default`` its value for no output.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any, TypeVar, cast

from pyinfra.api import FactBase

from gpuforge.probes.reading import Reading

T = TypeVar("T")


def fact_class_name(reading_name: str) -> str:
    """``nvidia.host`` -> ``NvidiaHost`` (pyinfra names the fact ``gpuforge.deploy.facts.adapter.NvidiaHost``)."""
    return "".join(part.capitalize() for part in reading_name.replace(".", "_").split("_"))


@cache
def reading_fact(reading: Reading[T]) -> type[FactBase[T]]:
    """The pyinfra fact class of ``reading`` (one class per reading, made once)."""

    def command(self: Any, *args: Any, **kwargs: Any) -> str:
        return reading.command(*args, **kwargs)

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_param, *inspect.signature(reading.command).parameters.values()]
    )

    def process(self: Any, output: list[str]) -> T:
        return reading.parse(output)

    def default() -> T:
        return reading.default()

    namespace = {
        "__module__": __name__,
        "__doc__": f"pyinfra fact of the ``{reading.name}`` reading ({reading.parse.__doc__ or ''}).",
        "reading": reading,
        "command": command,
        "process": process,
        "default": staticmethod(default),
    }
    return cast("type[FactBase[T]]", type(fact_class_name(reading.name), (FactBase,), namespace))
