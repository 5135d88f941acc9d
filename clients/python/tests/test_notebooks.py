"""The notebooks of docs/notebooks run top to bottom against the server (nbclient, a real
kernel): a cell that raises fails the test, naming the notebook and the cell."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT, Server

NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))


def test_there_are_three_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01-sweep-an-intervention.ipynb",
        "02-your-own-market-data.ipynb",
        "03-explore-infection-rate.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_runs(path: Path, server: Server, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SIMTREE_URL", server.url)
    book = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), "commit it without outputs"
    NotebookClient(book, timeout=300, kernel_name="python3").execute()
    images = sum("image/png" in o.get("data", {}) for c in book.cells for o in c.get("outputs", []))
    assert images >= 1, "each notebook plots"
