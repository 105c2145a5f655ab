"""The minimal %%mtsql magic, driven through a real IPython shell."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from mt_magic import MaterializedTableError, ParseError
from mt_magic.notebook.display import ResultView


@pytest.fixture
def shell(spark, db, store_path, monkeypatch):
    monkeypatch.setenv("MT_MAGIC_CATALOG_STORE", store_path)
    ip = InteractiveShell.instance()
    ip.user_ns["spark"] = spark
    ip.run_line_magic("load_ext", "mt_magic")
    yield ip
    ip.run_line_magic("unload_ext", "mt_magic")


def test_cell_magic_runs_statements_and_shows_the_last_result(shell, sales):
    view = shell.run_cell_magic("mtsql", "", "CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS "
                                             "SELECT * FROM sales;\nSHOW MATERIALIZED TABLES")
    assert isinstance(view, ResultView)
    assert "<td style='white-space:pre-wrap;text-align:left'>t</td>" in view._repr_html_()
    assert repr(view) == "materialized table\nt"
    assert repr(shell.run_line_magic("mtsql", "SELECT COUNT(*) AS n FROM t")) == "n\n4"


def test_user_errors_render_as_one_short_message(shell):
    with pytest.raises(ParseError) as info:
        shell.run_cell_magic("mtsql", "", "ALTER MATERIALIZED TABLE t\n  PAUSE")
    lines = info.value._render_traceback_()
    assert lines[0].startswith("ParseError: line 2, column 3:") and "Traceback" not in "".join(lines)
    with pytest.raises(MaterializedTableError, match="does not exist"):
        shell.run_line_magic("mtsql", "DROP MATERIALIZED TABLE nope")


def test_html_escapes_user_strings(shell, db):
    view = shell.run_line_magic("mtsql", "SELECT '<script>alert(1)</script>' AS x")
    assert "<script>" not in view._repr_html_() and "&lt;script&gt;" in view._repr_html_()


def test_unload_stops_the_gateway(shell, sales):
    shell.run_line_magic("mtsql", "CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    magics = shell.__dict__["_mt_magic_gateway"]
    scheduler = magics.gateway.scheduler._scheduler
    shell.run_line_magic("unload_ext", "mt_magic")
    assert not scheduler.running and "mtsql" not in shell.magics_manager.magics["cell"]
    shell.run_line_magic("load_ext", "mt_magic")
