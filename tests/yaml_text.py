"""YAML text of test data, written by libyaml's emitter where PyYAML has it.

The same safe representation as ``yaml.safe_dump`` (read back by any YAML parser as the same data),
at a tenth of the cost: PyYAML's pure-Python emitter took two thirds of the hostile-value tests'
time, each of which writes a spec of every field hundreds of times.
"""

from __future__ import annotations

from typing import Any

import yaml

DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(data: Any, **options: Any) -> str:
    """``yaml.safe_dump(data, **options)``, through libyaml."""
    text: str = yaml.dump(data, Dumper=DUMPER, **options)
    return text
