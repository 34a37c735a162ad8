"""The published JSON Schemas match the code and accept every bundled file; they reject what the loader rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hetsched.model.files import bundled_library_path, bundled_scenarios
from hetsched.model.schemas import SCHEMAS

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the 'test' extra")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_checked_in_schema_is_current(kind: str) -> None:
    on_disk = json.loads((ROOT / "schemas" / f"{kind}.schema.json").read_text())
    assert on_disk == json.loads(json.dumps(SCHEMAS[kind]())), "run: hetsched schema --write schemas"
    jsonschema.Draft202012Validator.check_schema(on_disk)


def test_bundled_files_validate() -> None:
    jsonschema.validate(yaml.safe_load(bundled_library_path().read_text()), SCHEMAS["tools"]())
    for path in bundled_scenarios().values():
        jsonschema.validate(yaml.safe_load(path.read_text()), SCHEMAS["scenario"]())


@pytest.mark.parametrize(
    "doc",
    [
        {"nodes": []},
        {"nodes": [{"id": "A"}]},
        {"nodes": {"A": "t"}, "mode": "quad"},
        {"nodes": {"A": "t"}, "machine": {"vram_budget_mb": 0}},
        {"nodes": {"A": "t"}, "cards": {"t": {"cpu_ms": -1}}},
        {"nodes": {"A": "t"}, "surprise": 1},
    ],
)
def test_schema_rejects_bad_scenarios(doc: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMAS["scenario"]())


def test_mapping_schema() -> None:
    jsonschema.validate({"A": "cpu", "B": "gpu_now"}, SCHEMAS["mapping"]())
    jsonschema.validate({"mapping": {"A": "gpu_queue"}}, SCHEMAS["mapping"]())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"A": "tpu"}, SCHEMAS["mapping"]())
