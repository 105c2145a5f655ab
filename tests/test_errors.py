"""Every statement form that reaches Spark fails as one clean MaterializedTableError, in both kinds of
session and in both --dry-run and execute: no py4j, gRPC or JVM text ever reaches a user."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException

from mt_magic import Gateway, MaterializedTableError
from mt_magic.spark.streaming import start_stream
from helpers import BRIDGE_TEXT

FAILING = [
    ("CREATE MATERIALIZED TABLE w (WATERMARK FOR ds AS ds) AS SELECT * FROM sales", "must be a TIMESTAMP"),
    ("CREATE MATERIALIZED TABLE w (WATERMARK FOR ds AS ds -) AS SELECT * FROM sales", "ds -"),
    ("CREATE MATERIALIZED TABLE x (amount BOGUS) AS SELECT * FROM sales", "amount"),
    ("CREATE MATERIALIZED TABLE x AS SELECT no_such_function(ds) AS d FROM sales", "no_such_function"),
    ("CREATE MATERIALIZED TABLE x AS SELECT CAST(ds AS NOTATYPE) AS d FROM sales", "NOTATYPE"),
    ("CREATE MATERIALIZED TABLE x AS SELECT missing_column FROM sales", "missing_column"),
    ("CREATE MATERIALIZED TABLE x AS SELECT * FROM sales WHERE amount >", "parse"),
    ("CREATE MATERIALIZED TABLE x (d AS no_such_function(ds)) AS SELECT * FROM sales", "no_such_function"),
    ("CREATE MATERIALIZED TABLE x WITH ('format' = 'nope') AS SELECT * FROM sales", "format"),
    ("CREATE TABLE c AS SELECT missing_column FROM sales", "missing_column"),
    ("CREATE TABLE c WITH ('format' = 'nope') AS SELECT * FROM sales", "format"),
    ("SELECT FROM WHERE", "FROM"),
    ("SELECT * FROM (", "PARSE_SYNTAX_ERROR"),
    ("SELECT * FROM nope", "nope"),
    ("INSERT INTO nope VALUES (1)", "nope"),
    ("DESCRIBE nope", "nope"),
    ("SELECT CAST('x' AS INT) AS i", "CAST"),
    ("SELECT 1 / 0 AS q", "DIVIDE_BY_ZERO"),
    ("SET 'spark.sql.warehouse.dir' = '/elsewhere'", "spark.sql.warehouse.dir"),
    ("CREATE MATERIALIZED TABLE x FRESHNESS = INTERVAL '²' HOUR AS SELECT * FROM sales", "positive integer"),
    ("CREATE MATERIALIZED TABLE x FRESHNESS = INTERVAL '12345678901234567890' SECOND AS SELECT * FROM sales",
     "longer than the longest"),
    ("SET 'materialized-table.refresh-mode.freshness-threshold' = '99999999999999999 d'", "longer than any"),
    ("SET 'materialized-table.missed-runs' = 'sometimes'", "not a policy"),
    ("SELECT '\ud800' AS s", "surrogate"),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "execute"])
@pytest.mark.parametrize("statement, fragment", FAILING, ids=[str(i) for i in range(len(FAILING))])
def test_spark_errors_are_clean(gw, sales, spark, statement, fragment, dry_run):
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        gw.execute(statement, dry_run=dry_run)
    except MaterializedTableError as error:
        message = str(error)
    else:
        if dry_run and statement.startswith(("INSERT", "DESCRIBE", "SELECT CAST", "SELECT 1 /")):
            return          # Spark checks its statements, and queries' values, when they run
        pytest.fail(f"{statement!r} did not fail")
    assert not BRIDGE_TEXT.search(message), message
    assert fragment.lower() in message.lower()
    assert gw.store.list() == []


def test_a_short_zone_id_as_spark_accepts_it(spark, gw, sales, store_path):
    spark.conf.set("spark.sql.session.timeZone", "PST")
    try:
        gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
                   "SELECT * FROM sales; ALTER MATERIALIZED TABLE t SUSPEND; ALTER MATERIALIZED TABLE t RESUME")
        assert gw.describe("t")["refresh_handler"]["time_zone"] == "America/Los_Angeles"
        gw.close()
        with Gateway(spark, catalog_store=store_path) as again:       # a new owner restores it
            assert again.describe("t")["next_refresh"] is not None
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_a_failed_initial_refresh_is_one_clean_line(gw, spark, db, tmp_path):
    """A source file Spark cannot read (here: not Parquet at all) fails CREATE's first refresh."""
    folder = tmp_path / "broken"
    spark.range(3).write.parquet(str(folder))
    (folder / "part-99999-broken.parquet").write_bytes(b"not parquet at all")
    spark.sql(f"CREATE TABLE broken (id BIGINT) USING parquet LOCATION 'file:{folder}'")
    with pytest.raises(MaterializedTableError) as caught:
        gw.execute("CREATE MATERIALIZED TABLE m REFRESH_MODE = FULL AS SELECT id FROM broken")
    message = str(caught.value)
    assert message.startswith("Failed to create materialized table") and "initial refresh" in message
    assert not BRIDGE_TEXT.search(message), message
    assert len(message.splitlines()) == 1 and gw.store.list() == []


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("query, line, column, shown", [
    ("SELECT ds,\n       missing_column\nFROM sales", 5, 8, "       missing_column"),     # analysis
    ("SELECT ds\nFROM sales\nWHERE amount >", 6, 15, "WHERE amount >"),                # parse
    ("SELECT ds FROM\n   no_such_table", 5, 4, "   no_such_table"),                     # a missing source
])
def test_spark_errors_in_a_query_point_into_the_cell(gw, sales, query, line, column, shown, dry_run):
    """Spark's own errors take the form of ours: line and column in the cell, the line, a caret."""
    cell = f"SHOW MATERIALIZED TABLES;\nCREATE MATERIALIZED TABLE x\nFRESHNESS = INTERVAL '1' HOUR\nAS {query}"
    with pytest.raises(MaterializedTableError) as info:
        gw.execute(cell, dry_run=dry_run)
    text = "\n".join(info.value._render_traceback_())
    assert "in statement 2 (CREATE MATERIALIZED TABLE x" in text
    assert f": line {line}, column {column}: " in text, text
    assert text.endswith(f"\n  {shown}\n  {' ' * (column - 1)}^"), text
    assert info.value.where == (line, column)       # for an editor to underline (the JupyterLab extension)


class _TimingOutWriter:
    """A stream writer whose foreachBatch worker misses Spark's fixed 10 s to connect back `misses`
    times: that timeout comes from a loaded machine, which a test cannot produce on demand."""

    def __init__(self, misses: int, message: str = "Python worker failed to connect back.") -> None:
        self.misses, self.message, self.starts = misses, message, 0

    def start(self) -> str:
        self.starts += 1
        if self.starts <= self.misses:
            raise PySparkException(message=self.message)
        return "started"


def test_a_stream_start_survives_a_python_worker_that_was_slow_to_connect_back():
    writer = _TimingOutWriter(misses=2)
    assert start_stream(writer) == "started" and writer.starts == 3
    with pytest.raises(Exception, match="failed to connect back"):
        start_stream(_TimingOutWriter(misses=3))
    other = _TimingOutWriter(misses=1, message="Python worker exited unexpectedly")
    with pytest.raises(Exception, match="exited unexpectedly"):
        start_stream(other)
    assert other.starts == 1
