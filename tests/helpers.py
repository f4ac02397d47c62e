"""Shared test helpers: repository paths, upstream reference data, example specs and variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import Spec, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[1]
INVENTORIES = REPO / "inventories"
UPSTREAM = REPO / ".." / "shared" / "reference" / "upstream"
needs_upstream = pytest.mark.skipif(
    not UPSTREAM.is_dir(), reason="upstream reference data (../shared/reference/upstream) is not present"
)


def inventory(name: str) -> Spec:
    """An example spec from inventories/."""
    return load_spec(INVENTORIES / f"{name}.yaml")


def variant(name: str, change: Callable[[dict[str, Any]], None]) -> Spec:
    """An example inventory with a change applied to its YAML data, checked like a real file."""
    data = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text())
    change(data)
    return parse_spec(yaml.safe_dump(data))
