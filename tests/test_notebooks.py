"""Restart & Run All is harmless: each example notebook, run twice on one folder (so on one catalog
store, with the first run's data and tables still there), gives the same checked outputs both times."""

from __future__ import annotations

import configparser
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
CHECKED = "nbval-check-output"


def sanitizers() -> list[tuple[re.Pattern, str]]:
    """The masks nbval uses for what changes from run to run (times, ids, scratch paths)."""
    config = configparser.ConfigParser()
    config.read(Path(__file__).parent / "nbval_sanitize.cfg")
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def checked_outputs(notebook) -> list[str]:
    masks = sanitizers()
    texts = []
    for cell in notebook.cells:
        if cell.cell_type == "code" and CHECKED in cell.metadata.get("tags", []):
            for output in cell.outputs:
                text = output.get("evalue") or output.get("text") or output.get("data", {}).get("text/plain", "")
                for pattern, replacement in masks:
                    text = pattern.sub(replacement, text)
                texts.append(text)
    return texts


def run(path: Path) -> nbformat.NotebookNode:
    """Top to bottom in a new kernel, as Restart & Run All does; a cell tagged raises-exception must fail
    and no other may."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


@pytest.mark.processes
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_runs_twice_on_one_store(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MT_EXAMPLE_DIR", str(tmp_path))
    first = checked_outputs(run(path))
    assert os.path.exists(tmp_path / "catalog.json")            # the second run meets the first one's store
    second = checked_outputs(run(path))
    assert second == first and first
