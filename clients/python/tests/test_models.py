"""The committed models (src/simtree_client/models.py) are what datamodel-code-generator makes
of the document the server serves: a wire change shows in the Python diff too."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

from simtree_client import Client

PACKAGE = Path(__file__).resolve().parents[1]
COMMITTED = PACKAGE / "src" / "simtree_client" / "models.py"


def generate(document: dict, folder: Path) -> str:
    """The models generated from ``document`` with the settings of pyproject.toml."""
    source = folder / "openapi.json"  # the name the generated header records
    source.write_text(json.dumps(document, indent=2, ensure_ascii=False))
    out = folder / "models.py"
    subprocess.run(
        [sys.executable, "-m", "datamodel_code_generator", "--input", str(source), "--output", str(out)],
        cwd=PACKAGE,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.read_text()


def test_the_committed_models_are_generated_from_the_served_document(client: Client, tmp_path: Path):
    fresh = generate(client.openapi(), tmp_path)
    committed = COMMITTED.read_text()
    if fresh != committed:
        diff = "".join(
            list(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), "committed", "served"))[:80]
        )
        raise AssertionError(
            "src/simtree_client/models.py differs from the server's OpenAPI document; regenerate it "
            "with `datamodel-codegen` in clients/python and commit it:\n" + diff
        )


def test_a_changed_document_changes_the_models(client: Client, tmp_path: Path):
    """The comparison above can fail: a field added to the wire changes the generated text."""
    doc = client.openapi()
    doc["components"]["schemas"]["TreeRef"]["properties"]["extra_field"] = {"type": "string"}
    assert "extra_field" in generate(doc, tmp_path)
    assert "extra_field" not in COMMITTED.read_text()
