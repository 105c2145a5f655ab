"""%%mtsql and %mtsql driven through a real IPython shell: flags, settings, errors, output, unload."""

from __future__ import annotations

import re
import threading
from datetime import date, datetime
from decimal import Decimal

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from mt_magic import MaterializedTableError, ParseError, SparkError, ValidationError
from mt_magic.notebook.dashboard import Dashboard
from mt_magic.notebook.display import ResultView
from mt_magic.notebook.magic import VerboseError

CREATE_T = "CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales"


@pytest.fixture
def shell(spark, db, store_path, monkeypatch):
    monkeypatch.setenv("MT_MAGIC_CATALOG_STORE", store_path)
    ip = InteractiveShell.instance()
    ip.user_ns["spark"] = spark
    ip.run_line_magic("load_ext", "mt_magic")
    yield ip
    ip.run_line_magic("unload_ext", "mt_magic")
    ip.config.pop("MtMagics", None)


def magics(ip):
    return ip.__dict__["_mt_magic_magics"]


def cell(ip, text: str, line: str = ""):
    return ip.run_cell_magic("mtsql", line, text)


def test_cell_shows_earlier_outcomes_and_the_last_result(shell, sales):
    view = cell(shell, f"{CREATE_T};\nSHOW MATERIALIZED TABLES")
    assert isinstance(view, ResultView)
    assert "<td style='white-space:pre-wrap;text-align:left'>t</td>" in view._repr_html_()
    assert repr(view).splitlines()[0].startswith("Created materialized table spark_catalog.")
    assert repr(view).splitlines()[1:] == ["materialized table", "t"]
    assert repr(shell.run_line_magic("mtsql", "SELECT COUNT(*) AS n FROM t")) == "n\n4"


def test_ddl_shows_one_line_saying_what_happened(shell, sales):
    view = shell.run_line_magic("mtsql", CREATE_T)
    text = repr(view)
    assert "\n" not in text
    assert "refresh mode FULL" in text
    # the time in the session's zone, named (UTC; the machine's zone, Etc/UTC here, once a test unset it)
    assert re.search(r", next refresh \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Za-z][\w/+-]*\.$", text), text
    assert view._repr_html_().startswith("<pre>Created materialized table")


def test_out_flag_stores_the_result_and_line_sql_keeps_its_quotes(shell, db):
    shell.run_line_magic("mtsql", "-o res SELECT 'a  b' AS x, \"c\" AS y")
    assert shell.user_ns["res"].rows == [("a  b", "c")]
    cell(shell, "SELECT 1 AS one", line="--out other")
    assert shell.user_ns["other"].columns == ["one"]


def test_dry_run_validates_and_changes_nothing(shell, sales, spark, store_path):
    view = shell.run_line_magic("mtsql", f"--dry-run {CREATE_T}")
    assert repr(view).startswith("Valid: would create materialized table spark_catalog.")
    assert not spark.catalog.tableExists("t")
    assert magics(shell).gateway.store.list() == []
    shell.run_line_magic("mtsql", "--dry-run INSERT INTO sales VALUES ('2024-01-03', 3, 1.0)")
    assert spark.table("sales").count() == 4
    with pytest.raises(SparkError, match="nope"):
        shell.run_line_magic("mtsql", "--dry-run SELECT * FROM nope")
    shell.run_line_magic("mtsql", CREATE_T)
    with pytest.raises(ValidationError, match="drop column is unsupported"):
        shell.run_line_magic("mtsql", "--dry-run ALTER MATERIALIZED TABLE t AS SELECT ds FROM sales")
    with pytest.raises(ValidationError, match="unknown partition keys"):
        shell.run_line_magic("mtsql", "--dry-run ALTER MATERIALIZED TABLE t REFRESH PARTITION (x = '1')")
    before = magics(shell).gateway.store.get(f"spark_catalog.{spark.catalog.currentDatabase()}.t")
    shell.run_line_magic("mtsql", "--dry-run ALTER MATERIALIZED TABLE t SUSPEND")
    assert magics(shell).gateway.store.get(before.identifier).refresh_status == "ACTIVATED"


def test_user_errors_are_one_short_message_and_fail_the_cell(shell, capsys):
    result = shell.run_cell("%%mtsql\nALTER MATERIALIZED TABLE t\n  PAUSE")
    assert isinstance(result.error_in_exec, ParseError)
    shown = capsys.readouterr().out
    assert "Traceback" not in shown
    assert [line for line in shown.splitlines() if not line.startswith("mt_magic:")] == [
        'ParseError: line 2, column 3: Encountered "PAUSE"; expected "SUSPEND", "RESUME", "REFRESH", '
        '"BACKFILL", "AS", "SET", "RESET".', "    PAUSE", "    ^"]


def test_an_error_is_placed_in_the_text_the_user_wrote(shell):
    """Where an error lies, for an editor to underline it: in the cell as written, before its
    {{variables}} became literals of another length."""
    shell.user_ns["owner"] = "a value longer than its placeholder"
    line = "CREATE MATERIALIZED TABLE t WITH ('owner' = {{ owner }}) REFRESH_MODE = SOMETIMES AS SELECT 1"
    placed = shell.run_cell(f"%%mtsql\n{line}").error_in_exec
    assert isinstance(placed, ParseError) and placed.where == (1, line.index("SOMETIMES") + 1)
    assert placed.summary == 'Encountered "SOMETIMES"; expected "CONTINUOUS" or "FULL".'
    unknown = shell.run_cell("%%mtsql\nSELECT 1 AS one,\n  {{ nope }} AS two").error_in_exec
    assert isinstance(unknown, ValidationError) and unknown.where == (2, 3)


def test_verbose_shows_the_traceback(shell, capsys):
    result = shell.run_cell("%mtsql --verbose DROP MATERIALIZED TABLE nope")
    assert isinstance(result.error_in_exec, VerboseError)
    assert isinstance(result.error_in_exec.__cause__, MaterializedTableError)
    shown = capsys.readouterr().out
    assert "Traceback" in shown and "does not exist" in shown
    shell.run_line_magic("config", "MtMagics.verbose_errors = True")
    assert isinstance(shell.run_cell("%mtsql DROP MATERIALIZED TABLE nope").error_in_exec, VerboseError)


def test_an_error_names_its_statement_and_stops_the_cell(shell, sales, capsys):
    result = shell.run_cell(f"%%mtsql\n{CREATE_T};\nALTER MATERIALIZED TABLE nope SUSPEND;\nSELECT 1")
    assert result.error_in_exec is not None
    assert "in statement 2 (ALTER MATERIALIZED TABLE nope SUSPEND)" in capsys.readouterr().out
    assert repr(shell.run_line_magic("mtsql", "SHOW MATERIALIZED TABLES")) == "materialized table\nt"


def test_bad_flags_are_usage_errors(shell):
    with pytest.raises(UsageError, match="unrecognized arguments"):
        shell.run_line_magic("mtsql", "--nope SELECT 1")


def test_trailing_semicolon_silences_the_output(shell, db, capsys):
    shell.run_cell("%mtsql -o r SELECT 41 + 1 AS answer;")
    assert "answer" not in capsys.readouterr().out
    assert shell.user_ns["r"].rows == [(42,)]
    shell.run_cell("%mtsql SELECT 41 + 1 AS answer")
    assert "answer" in capsys.readouterr().out
    # SQL indents freely, which Python's tokenizer (IPython's own ';' check) rejects
    result = shell.run_cell("%%mtsql -o c\nSELECT 1 AS a,\n          2 AS b\n   FROM range(1);  -- done\n")
    assert result.error_in_exec is None and result.result is None and shell.user_ns["c"].rows == [(1, 2)]
    result = shell.run_cell("%%mtsql\nSELECT 1 AS a,\n          2 AS b\n   FROM range(1)\n")
    assert result.error_in_exec is None and repr(result.result) == "a | b\n1 | 2"


def test_variables_are_substituted_only_as_literals_of_their_type(shell, db):
    shell.user_ns.update(name="x' OR '1'='1", n=5, a="expanded", b="expanded", nothing=None)
    view = shell.run_line_magic(
        "mtsql", "SELECT {{name}} AS v, {{ n }} AS n, '{a}' AS braces, '$b' AS dollar, "
                 "'{{name}}' AS literal, {{nothing}} IS NULL AS null_ok")
    assert view.rows == [("x' OR '1'='1", 5, "{a}", "$b", "{{name}}", True)]
    with pytest.raises(ValidationError, match="no notebook variable named 'missing'"):
        cell(shell, "SELECT {{missing}}")
    # Each value is a literal of its type: a number where Spark wants one (LIMIT), a negative one
    # parenthesized (`id-{{low}}` is not the comment `id--2`), a float a DOUBLE, a Decimal its own.
    shell.user_ns.update(low=-2, ratio=0.1, price=Decimal("80.50"), flag=True, day=date(2024, 1, 31),
                         at=datetime(2024, 1, 31, 12, 30, 0, 5))
    view = shell.run_line_magic(
        "mtsql", "SELECT id-{{low}} AS shifted, {{ratio}} AS r, typeof({{ratio}}) AS rt, {{price}} AS p, "
                 "typeof({{price}}) AS pt, {{flag}} AND true AS f, {{day}} AS d, {{at}} AS at "
                 "FROM range(3) LIMIT {{n}}")
    assert view.rows[0] == (2, 0.1, "double", Decimal("80.50"), "decimal(4,2)", True, date(2024, 1, 31),
                            datetime(2024, 1, 31, 12, 30, 0, 5))
    assert len(view.rows) == 3
    shell.user_ns.update(days=["d1"])
    with pytest.raises(ValidationError, match=r"\{\{days\}\}: a list has no SQL literal"):
        cell(shell, "SELECT * FROM range(1) WHERE id IN ({{days}})")
    # A value ending in a backslash cannot end its literal early and smuggle in a statement.
    shell.user_ns.update(day="2024-01-01\\", region="); DROP TABLE src; --", path="C:\\temp\\")
    view = shell.run_line_magic("mtsql", "SELECT {{day}} AS d, {{region}} AS r, {{path}} AS p")
    assert view.rows == [("2024-01-01\\", "); DROP TABLE src; --", "C:\\temp\\")]


def test_settings_are_traitlets(shell, sales, tmp_path):
    shell.run_line_magic("config", "MtMagics.display_limit = 2")
    view = shell.run_line_magic("mtsql", "SELECT * FROM sales ORDER BY amount")
    assert len(view._shown) == 2
    assert repr(view).endswith("(showing the first 2 rows (display limit 2))")
    assert "display limit 2" in view._repr_html_()
    other = str(tmp_path / "other" / "catalog.json")
    shell.run_line_magic("config", f"MtMagics.catalog_store = {other!r}")
    shell.run_line_magic("config", "MtMagics.default_options = "
                                   "{'materialized-table.full.initialize': 'on-schedule'}")
    shell.run_line_magic("mtsql", CREATE_T)
    gateway = magics(shell).gateway
    assert gateway.store.path == other
    assert gateway.store.list()[0].last_refresh is None      # no initial refresh: on-schedule


def test_profile_config_reaches_the_magics(spark, db, store_path, monkeypatch):
    monkeypatch.setenv("MT_MAGIC_CATALOG_STORE", store_path)
    ip = InteractiveShell.instance()
    ip.config.MtMagics.display_limit = 1
    ip.user_ns["spark"] = spark
    ip.run_line_magic("load_ext", "mt_magic")
    try:
        assert magics(ip).display_limit == 1
    finally:
        ip.run_line_magic("unload_ext", "mt_magic")
        ip.config.pop("MtMagics", None)


def test_the_session_is_the_notebooks_own_and_named_once(shell, spark, capsys):
    shell.run_line_magic("mtsql", "SELECT 1 AS x")
    assert "using notebook variable 'spark'" in capsys.readouterr().out
    shell.run_line_magic("mtsql", "SELECT 1 AS x")
    assert "using" not in capsys.readouterr().out
    assert magics(shell).gateway.spark is spark
    shell.user_ns["not_spark"] = 42
    with pytest.raises(ValidationError, match="no SparkSession in a notebook variable named 'not_spark'"):
        shell.run_line_magic("mtsql", "--spark not_spark SELECT 1")


def test_dashboard_commands(shell, sales):
    shell.run_line_magic("mtsql", CREATE_T)
    board = shell.run_line_magic("mtsql", "dashboard")
    assert isinstance(board, Dashboard) and repr(board).splitlines()[1] == "t: FULL, ACTIVATED, freshness 1 HOUR"
    detail = shell.run_line_magic("mtsql", "dashboard t")
    assert "Recent refreshes" in detail.detail.value
    with pytest.raises(MaterializedTableError, match="does not exist"):
        shell.run_line_magic("mtsql", "dashboard nope")
    shell.run_line_magic("config", "MtMagics.show_dashboard = True")
    assert isinstance(shell.run_line_magic("mtsql", CREATE_T.replace(" t ", " t2 ")), Dashboard)


def test_one_gateway_per_kernel(shell, sales):
    shell.run_line_magic("mtsql", "SELECT 1 AS x")
    first = magics(shell).gateway
    assert shell.extension_manager.load_extension("mt_magic") == "already loaded"
    shell.run_line_magic("mtsql", "SELECT 1 AS x")
    assert magics(shell).gateway is first


def test_unload_stops_everything_and_leaves_no_threads(shell, sales, spark, tmp_path):
    def ours() -> list[str]:
        return sorted(t.name for t in threading.enumerate()
                      if t.name.startswith(("APScheduler", "mt_magic")))

    baseline = set(threading.enumerate())
    shell.run_line_magic("mtsql", CREATE_T)
    shell.run_line_magic("mtsql", f"SET 'execution.checkpointing.dir' = '{tmp_path}/cp'")
    shell.run_line_magic("mtsql", "CREATE MATERIALIZED TABLE s FRESHNESS = INTERVAL '1' SECOND "
                                  "REFRESH_MODE = CONTINUOUS AS SELECT product_id, SUM(amount) AS total "
                                  "FROM sales GROUP BY product_id")
    shell.run_line_magic("mtsql", "dashboard")
    scheduler = magics(shell).gateway.pipelines.scheduler._scheduler
    assert scheduler.running and spark.streams.active
    shell.run_line_magic("unload_ext", "mt_magic")
    assert not scheduler.running and not spark.streams.active
    assert "mtsql" not in shell.magics_manager.magics["cell"]
    assert "mtsql" not in shell.magics_manager.lazy_magics
    new = [t.name for t in set(threading.enumerate()) - baseline if t.is_alive()]
    # our threads are all named; unnamed ones and PySpark's own client pools are not ours
    assert [n for n in new if not n.startswith(("Thread-", "ThreadPoolExecutor-"))] == [] and ours() == []
    shell.run_line_magic("load_ext", "mt_magic")


def test_a_spark_error_is_one_message_and_nothing_on_stderr(shell, db, capfd):
    shell.run_line_magic("mtsql", "SELECT 1 AS warm_up")
    capfd.readouterr()
    result = shell.run_cell("%mtsql SELECT * FROM nope")
    assert isinstance(result.error_in_exec, SparkError)
    out, err = capfd.readouterr()
    assert err == ""
    assert out.startswith("SparkError: Spark: [TABLE_OR_VIEW_NOT_FOUND]") and "Traceback" not in out


def test_out_keeps_every_row_as_a_dataframe_and_refresh_shows_one_line(shell, db):
    shell.run_cell("%%mtsql -o r\nSELECT id FROM range(2500)")
    view = shell.user_ns["r"]
    assert len(view.rows) == 1000 and view.df.count() == 2500 and len(view.to_pandas()) == 2500
    shell.run_cell("%%mtsql\nSET 'materialized-table.result.max-rows' = '5'")
    shell.run_cell("%%mtsql -o few\nSELECT id FROM range(20)")
    assert len(shell.user_ns["few"].rows) == 5 and len(shell.user_ns["few"].to_pandas()) == 20
    spark = shell.user_ns["spark"]
    spark.sql("CREATE TABLE src AS SELECT id, CAST(id % 2 AS STRING) AS k FROM range(4)")
    shell.run_cell("%%mtsql\nCREATE MATERIALIZED TABLE mt REFRESH_MODE = FULL AS SELECT k, COUNT(*) AS n FROM src GROUP BY k")
    result = shell.run_cell("%%mtsql -o refreshed\nALTER MATERIALIZED TABLE mt REFRESH")
    assert re.fullmatch(r"Refreshed spark_catalog\.\S+\.mt \(whole table\): 2 rows in [\d.]+ s\.", repr(result.result))
    assert shell.user_ns["refreshed"].columns == ["job id", "cluster info", "rows", "partition"]   # for code


def test_help_starts_with_the_usage_and_unload_leaves_other_loggers_alone(shell):
    import logging
    help_text = shell.find_cell_magic("mtsql").__doc__
    assert help_text.startswith("  %mtsql [-o NAME]") and "BACKFILL FROM" in help_text and "EXPLAIN" in help_text
    shell.run_line_magic("unload_ext", "mt_magic")
    handlers = {name: list(logging.getLogger(name).handlers) for name in ("apscheduler", "py4j", "mt_magic")}
    shell.run_line_magic("load_ext", "mt_magic")
    shell.run_line_magic("unload_ext", "mt_magic")
    assert {name: list(logging.getLogger(name).handlers) for name in handlers} == handlers
    shell.run_line_magic("load_ext", "mt_magic")
