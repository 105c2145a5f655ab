"""The quickstart notebook, executed with its widget state saved, rendered to HTML and opened in
headless Chromium: the dashboard's rows must be real DOM, drawn by the widget manager offline."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / "tests" / "browser" / "node_modules"
ARTIFACTS = ROOT / "build" / "test-artifacts"
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--allow-file-access-from-files", "--virtual-time-budget=15000", "--window-size=1400,4000"]


def chromium(page: Path, profile: Path, *args: str) -> str:
    done = subprocess.run([*CHROMIUM, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=180, check=True)
    return done.stdout


@pytest.mark.processes      # a kernel and Chromium of its own; the widgets render alike whatever the session
def test_the_quickstart_dashboard_renders_in_chromium(tmp_path, monkeypatch):
    renderer = NODE_MODULES / "@jupyter-widgets/html-manager/dist/embed-amd.js"
    assert renderer.exists(), "the widget manager is missing: `make test` installs it (npm ci in tests/browser)"
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    book = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    # the dashboard as it stands before the notebook's clean-up drops the table
    book.cells = book.cells[:next(i for i, c in enumerate(book.cells) if c.source.startswith("## Clean up"))]
    NotebookClient(book, timeout=180, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    assert book.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]

    exporter = HTMLExporter(
        widget_renderer_url=renderer.as_uri(),
        require_js_url=(NODE_MODULES / "requirejs/require.js").as_uri())
    page = tmp_path / "01_quickstart.html"
    page.write_text(exporter.from_notebook_node(book)[0])

    dom = chromium(page, tmp_path / "profile", "--dump-dom")
    rendered = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)   # not the saved state's JSON
    rows = re.findall(r'<table class="mt-dashboard"[^>]*>.*?</table>', rendered, flags=re.S)
    assert any("<b>product_sales</b>" in r and "FULL" in r and "ACTIVATED" in r for r in rows), \
        [re.sub(r"<[^>]+>", " ", r)[:2000] for r in rows]        # what the dashboard showed instead
    assert re.search(r'<button[^>]*widget-button[^>]*>.*?Suspend', rendered, flags=re.S)
    assert 'class="mt-lineage"' in rendered and "spark_catalog.default.products" in rendered

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "quickstart-dashboard.png"
    chromium(page, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
