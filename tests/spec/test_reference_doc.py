"""docs/spec-reference.md is what `gpuforge schema --markdown` generates from the models."""

from __future__ import annotations

from gpuforge.spec.reference import markdown_reference
from tests.conftest import REPO


def test_spec_reference_is_up_to_date() -> None:
    doc = (REPO / "docs" / "spec-reference.md").read_text()
    assert doc == markdown_reference(), "run: gpuforge schema --markdown -o docs/spec-reference.md"
    assert "| `max_time` |" in doc and "| live |" in doc and "| rolling |" in doc and "| rebuild |" in doc
