"""The JupyterLab extension as a user meets it: a real JupyterLab server, the notebook opened in
headless Chromium (driven by Playwright), %%mtsql cells shown as Spark SQL and an error underlined
where the kernel says it lies; the same highlighting in Notebook 7; the wheel carrying it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "build" / "test-artifacts"
BUILT = ROOT / "labextension" / "dist"

SESSION = "from mt_magic.session import local_session  # a Python comment\nspark = local_session(warehouse={!r})"
MTSQL = """%%mtsql
-- daily totals, kept fresh
CREATE MATERIALIZED TABLE daily_sales /* a /* nested */ comment */
FRESHNESS = INTERVAL '1' HOUR
AS SELECT ds, SUM(amount) * 2 AS total, {{n}} AS n FROM sales GROUP BY ds"""
BROKEN = """%%mtsql
CREATE MATERIALIZED TABLE broken
FRESHNESS = INTERVAL '1' HOUR
REFRESH_MODE = SOMETIMES
AS SELECT 1 AS one"""
COLORS = {"keyword": "--jp-mirror-editor-keyword-color", "string": "--jp-mirror-editor-string-color",
          "number": "--jp-mirror-editor-number-color", "comment": "--jp-mirror-editor-comment-color",
          "variable": "--jp-mirror-editor-variable-2-color", "meta": "--jp-mirror-editor-meta-color"}

# Each token of a cell as the editor drew it: its text, colour and weight.
TOKENS = """index => [...(document.querySelectorAll('.jp-Notebook .jp-Cell')[index]
    ?.querySelectorAll('.cm-content .cm-line span') ?? [])].map(span => {
        const style = getComputedStyle(span);
        return [span.textContent, style.color, style.fontWeight];
    })"""
# The theme's colour of each kind of token, as the browser computes it.
THEME = """names => Object.fromEntries(Object.entries(names).map(([kind, name]) => {
        const probe = document.createElement('span');
        probe.style.color = `var(${name})`;
        document.body.appendChild(probe);
        const color = getComputedStyle(probe).color;
        probe.remove();
        return [kind, color];
    }))"""
# Where the underline is: its line in the cell's editor (1-based), its column, its text.
UNDERLINE = """() => {
        const mark = document.querySelector('.cm-mtsql-error');
        const line = mark.closest('.cm-line');
        const range = document.createRange();
        range.setStart(line, 0);
        range.setEnd(mark, 0);
        return [[...line.parentElement.children].indexOf(line) + 1, range.toString().length + 1,
                mark.textContent];
    }"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _jupyterlab(folder: Path) -> Iterator[str]:
    """A JupyterLab server of the test environment serving `folder` (Notebook 7's pages too), with
    settings of its own; its URL."""
    settings = folder / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port, state = _free_port(), folder / ".state"
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(folder / ".settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(state / "workspaces"), "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
           "MT_MAGIC_CATALOG_STORE": str(state / "store" / "catalog.json"), "SPARK_LOCAL_IP": "127.0.0.1"}
    log = (folder / ".server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={folder}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (folder / ".server.log").read_text()
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)
        log.close()


def _notebook(path: Path, *sources: str) -> None:
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(book, path)


def _await_token(page, index: int, text: str, shown: bool = True) -> None:
    """Until the editor of cell `index` draws `text` as one token (or no longer does)."""
    page.wait_for_function(f"([index, text, shown]) => ({TOKENS})(index).some(([t]) => t === text) === shown",
                           arg=[index, text, shown])


def _styled(page, index: int) -> dict[str, tuple[str, str]]:
    return {text: (color, weight) for text, color, weight in page.evaluate(TOKENS, index)}


def _assert_highlighted(page) -> None:
    """The %%mtsql cell (the second) as Spark SQL, the Python cell (the first) as Python."""
    _await_token(page, 0, "# a Python comment")       # Python's highlighting comes with the kernel's language
    _await_token(page, 1, "FRESHNESS")
    theme = page.evaluate(THEME, COLORS)
    python, sql = _styled(page, 0), _styled(page, 1)
    assert python["import"][0] == theme["keyword"] and python["# a Python comment"][0] == theme["comment"], python
    for text, kind in [("CREATE", "keyword"), ("MATERIALIZED", "keyword"), ("FRESHNESS", "keyword"),
                       ("INTERVAL", "keyword"), ("SELECT", "keyword"), ("'1'", "string"), ("2", "number"),
                       ("-- daily totals, kept fresh", "comment"), ("/* a /* nested */ comment */", "comment"),
                       ("{{n}}", "variable"), ("%%mtsql", "meta")]:
        assert sql[text][0] == theme[kind], (text, kind, sql.get(text), theme)
    assert int(sql["CREATE"][1]) >= 600 and "daily_sales" not in sql, sql       # bold; a name stays plain


@pytest.mark.processes      # a JupyterLab server, its kernel and Chromium of their own
def test_mtsql_cells_look_like_sql_and_errors_point_at_the_text(tmp_path):
    from playwright.sync_api import sync_playwright
    assert (BUILT / "package.json").exists(), "the extension is not built: `make test` builds it"
    _notebook(tmp_path / "lab.ipynb", SESSION.format(str(tmp_path / "warehouse")), MTSQL, BROKEN)
    _notebook(tmp_path / "notebook7.ipynb", SESSION.format(str(tmp_path / "warehouse")), MTSQL)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _jupyterlab(tmp_path) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(90_000)
        page.goto(f"{url}/lab/tree/lab.ipynb")
        page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=180_000)
        _assert_highlighted(page)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-mtsql-cell.png"))

        # The first line no longer the magic's: the cell is Python again; the magic's again: SQL.
        comment = "-- daily totals, kept fresh"
        theme = page.evaluate(THEME, COLORS)
        page.locator(".jp-Cell").nth(1).locator(".cm-line").first.click()
        page.keyboard.press("Home")
        page.keyboard.type("x")
        _await_token(page, 1, comment, shown=False)
        assert "CREATE" not in _styled(page, 1) or _styled(page, 1)["CREATE"][0] != theme["keyword"]
        page.keyboard.press("Backspace")
        _await_token(page, 1, comment)
        assert _styled(page, 1)[comment][0] == theme["comment"]

        # A parse error: underlined where the error's text says, its message on hover.
        page.locator(".jp-Cell").nth(0).locator(".cm-content").click()
        page.keyboard.press("Control+Enter")        # the session, then the broken cell
        page.locator(".jp-Cell").nth(2).locator(".cm-content").click()
        page.keyboard.press("Control+Enter")
        error = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output >> text=ParseError")
        error.wait_for(timeout=180_000)
        line, column = map(int, re.search(r"line (\d+), column (\d+)", error.inner_text()).groups())
        page.wait_for_selector(".cm-mtsql-error")
        assert page.evaluate(UNDERLINE) == [line + 1, column, "SOMETIMES"]     # the %%mtsql line is the first
        page.hover(".cm-mtsql-error")
        message = page.wait_for_selector(".cm-mtsql-error-message").inner_text()
        assert message == 'ParseError: Encountered "SOMETIMES"; expected "CONTINUOUS" or "FULL".'
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-mtsql-error.png"))
        page.close()

        notebook7 = browser.new_page(viewport={"width": 1280, "height": 900})
        notebook7.set_default_timeout(90_000)
        notebook7.goto(f"{url}/notebooks/notebook7.ipynb")
        _assert_highlighted(notebook7)
        notebook7.screenshot(path=str(ARTIFACTS / "notebook7-mtsql-cell.png"))
        browser.close()


@pytest.mark.processes      # a kernel of its own
def test_an_error_with_a_place_is_told_to_the_front_end(kernel, tmp_path):
    """The kernel's execute reply carries the place (in the cell, the %%mtsql line the first) for an
    extension to underline; the error's text is what every front end shows, as before."""
    from helpers import run
    client = kernel()
    _, _, error = run(client, SESSION.format(str(tmp_path / "warehouse")))
    assert error is None, error
    cell = "%%mtsql\nCREATE MATERIALIZED TABLE t AS\nSELECT id,\n       missing_column FROM range(3)"
    shown = []
    reply = client.execute_interactive(cell, timeout=180, output_hook=lambda message: shown.append(message))
    [error] = [m["content"] for m in shown if m["msg_type"] == "error"]
    assert error["ename"] == "SparkError" and "line 3, column 8:" in error["traceback"][0], error
    [place] = [p for p in reply["content"]["payload"] if p["source"] == "mt_magic.diagnostic"]
    assert (place["line"], place["column"]) == (4, 8) and "missing_column" in place["message"], place
    fine = client.execute_interactive("%%mtsql\nSHOW MATERIALIZED TABLES", timeout=180, output_hook=lambda _: None)
    assert fine["content"]["status"] == "ok" and fine["content"]["payload"] == []


@pytest.mark.processes      # once, not per session kind: Spark's first sql_keywords() takes seconds
def test_the_extension_knows_every_keyword(spark):
    """Spark SQL's keywords and those of our statement grammar are the ones the editor shows."""
    spec = importlib.util.spec_from_file_location("keywords", ROOT / "labextension" / "keywords.py")
    keywords = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keywords)
    written = json.loads(keywords.WRITTEN.read_text())
    assert {"MATERIALIZED", "FRESHNESS", "REFRESH_MODE", "SUSPEND", "SELECT"} <= set(written)
    assert written == keywords.keywords(spark), "labextension/src/keywords.json is out of date: " \
                                                "run `python labextension/keywords.py`"


@pytest.mark.processes      # a virtual environment of its own
def test_the_wheel_carries_the_extension_and_jupyterlab_finds_it(tmp_path):
    """`pip wheel .` holds the built extension; a new environment with that wheel and JupyterLab alone
    (no Node.js) lists it as enabled."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "wheels"), str(ROOT)], check=True,
                   capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheels").glob("mt_magic-*.whl")
    held = zipfile.ZipFile(wheel).namelist()
    shared = [n.split("/data/", 1)[1] for n in held if "/data/share/jupyter/labextensions/mt-magic/" in n]
    assert {"share/jupyter/labextensions/mt-magic/package.json",
            "share/jupyter/labextensions/mt-magic/install.json"} <= set(shared), shared
    assert any(re.fullmatch(r"share/jupyter/labextensions/mt-magic/static/remoteEntry\.\w+\.js", n) for n in shared)
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    install = [fresh / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile"]
    # Only the wheel (Spark and the rest it needs play no part in finding the extension) and JupyterLab.
    subprocess.run([*install, "--no-deps", str(wheel)], check=True, capture_output=True, timeout=300)
    subprocess.run([*install, "jupyterlab>=4.6,<5"], check=True, capture_output=True, timeout=900)
    listed = subprocess.run([fresh / "bin" / "jupyter", "labextension", "list"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    lines = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr).splitlines()
    assert any(re.match(r"\s*mt-magic v[\d.]+ enabled OK \(python, mt-magic\)", line) for line in lines), lines
