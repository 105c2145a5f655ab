"""Restart & Run All is harmless, over Spark Connect too: each example notebook, its kernel a client of
a local Spark Connect server, run twice on one folder (so on one catalog store, with the first run's
data and tables still there), gives the checked outputs saved in it both times — what nbval checks of
a run on a classic session (in `make test`'s classic pass)."""

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
    monkeypatch.setenv("MT_MAGIC_SPARK_REMOTE", "local[2]")
    saved = checked_outputs(nbformat.read(path, as_version=4))
    first = checked_outputs(run(path))
    assert first == saved and first
    assert os.path.exists(tmp_path / "catalog.json")            # the second run meets the first one's store
    assert checked_outputs(run(path)) == saved
