"""The committed models (src/simtree_client/models.py) are what datamodel-code-generator makes
of the document the server serves: a wire change shows in the Python diff too."""

from __future__ import annotations

import difflib
import json
import os
import warnings
from pathlib import Path

from simtree_client import Client

PACKAGE = Path(__file__).resolve().parents[1]
COMMITTED = PACKAGE / "src" / "simtree_client" / "models.py"


def generate(document: dict, folder: Path) -> str:
    """The models generated from ``document`` with the settings of pyproject.toml."""
    source = folder / "openapi.json"  # the name the generated header records
    source.write_text(json.dumps(document, indent=2, ensure_ascii=False))
    out = folder / "models.py"
    # In this process (the generator's import is most of its time), in the package's folder so
    # that it reads the settings of its pyproject.toml.
    from datamodel_code_generator.__main__ import Exit, main

    here = os.getcwd()
    os.chdir(PACKAGE)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert main(["--input", str(source), "--output", str(out)]) == Exit.OK
    finally:
        os.chdir(here)
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
