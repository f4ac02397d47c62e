"""The DCGM 4 ``dcgmi diag -j`` fixtures are valid against DCGM's own schema of that output."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.facts.test_facts import FIXTURE_DIR

SCHEMA = Path(__file__).parent / "upstream" / "dcgm_diag_schema.json"
# DCGM's schema names no draft ("http://json-schema.org/schema#"): it uses draft-7 keywords only.
VALIDATOR = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
DCGM4 = sorted(p for p in (FIXTURE_DIR / "dcgm").glob("diag_json_dcgm4_*.json"))


def test_there_are_dcgm4_json_fixtures() -> None:
    assert len(DCGM4) >= 2, "the DCGM 4 JSON format needs its fixtures (tests/facts/fixtures/dcgm/diag_json_dcgm4_*)"


@pytest.mark.parametrize("path", DCGM4, ids=lambda p: p.stem)
def test_fixture_matches_dcgms_schema(path: Path) -> None:
    lines = [line for line in json.loads(path.read_text())["output"] if not line.startswith("__")]
    document = json.loads("\n".join(lines))
    VALIDATOR.validate(document)
    # The parts gpuforge reads, as DCGM 4 places them: metadata at the top, a summary per test.
    assert document["metadata"]["version"].startswith("4.")
    for category in document["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            assert test["test_summary"]["status"] in {"Pass", "Fail", "Skip"}
            assert all(r["entity_group"] == "GPU" for r in test["results"])


def test_schema_rejects_the_dcgm3_layout() -> None:
    """The schema is DCGM 4's: the 3.x root name does not satisfy it (so it can tell them apart)."""
    v3 = json.loads((FIXTURE_DIR / "dcgm" / "diag_json_v3_skip_and_fail.json").read_text())
    document = json.loads("\n".join(line for line in v3["output"] if not line.startswith("__")))
    with pytest.raises(jsonschema.ValidationError, match="'DCGM Diagnostic' is a required property"):
        VALIDATOR.validate(document)
