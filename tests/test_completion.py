"""Tab in %%mtsql cells, through a real kernel's completion request (what JupyterLab, Notebook 7 and VS
Code send), on a kernel with the extension autoloaded: keywords from the statement grammar, tables,
columns, materialized tables, WITH options and their values, {{variables}} — and plain Python cells
complete as before. Over a classic session, and over Spark Connect when the suite runs that way."""

from __future__ import annotations

import pytest

from helpers import kernels, run

SETUP = """%%mtsql
CREATE DATABASE IF NOT EXISTS shop;
CREATE TABLE shop.stores (store_id INT, city STRING) USING parquet;
CREATE TABLE sales (ds STRING, product_id INT, amount DOUBLE) USING parquet;
CREATE MATERIALIZED TABLE daily_sales FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS
SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds"""


def complete(client, code: str, at: str | None = None) -> list[str]:
    """The matches of a completion request with the cursor at the end of `code`, or right after the
    first `at` in it."""
    cursor = len(code) if at is None else code.index(at) + len(at)
    reply = client.complete(code, cursor, reply=True, timeout=60)["content"]
    assert reply["status"] == "ok"
    return reply["matches"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One kernel for the module, with a session, a plain table, one in another database and a
    materialized table."""
    folder = tmp_path_factory.mktemp("completion")
    with kernels(folder) as start:
        client = start()
        _, _, error = run(client, f"from mt_magic.session import local_session\n"
                                  f"spark = local_session(warehouse={str(folder / 'warehouse')!r})")
        assert error is None, error
        _, _, error = run(client, SETUP)
        assert error is None, error
        yield client


def test_keywords_come_from_the_grammar_even_before_the_magic_first_ran(tmp_path):
    with kernels(tmp_path) as start:
        fresh = start()
        assert complete(fresh, "%%mtsql\nCREATE MAT") == ["MATERIALIZED"]      # the autoload loads it now
        assert complete(fresh, "%%mtsql\nCREATE MATERIALIZED TABLE t ") == \
            ["AS", "COMMENT", "DISTRIBUTED", "FRESHNESS", "PARTITIONED", "REFRESH_MODE", "WITH"]
        assert complete(fresh, "%%mtsql\nALTER MATERIALIZED TABLE t SUS") == ["SUSPEND"]
        assert complete(fresh, "%mtsql SHOW MATER") == ["MATERIALIZED"]
        assert "print" in complete(fresh, "x = 1\nprin")          # Python cells complete as before
        _, session, _ = run(fresh, "from mt_magic.spark.sessions import active_session; active_session() is None")
        assert session == "True"           # completing started no Spark session
        run(fresh, "%unload_ext mt_magic")
        assert "MATERIALIZED" not in complete(fresh, "%%mtsql\nCREATE MAT")     # unloading took the matcher


def test_tables_after_from_and_join_materialized_first(client):
    assert complete(client, "%%mtsql\nSELECT * FROM ")[:2] == ["daily_sales", "sales"]
    assert complete(client, "%%mtsql\nSELECT * FROM sales s JOIN da") == ["daily_sales"]
    assert complete(client, "%%mtsql\nSELECT * FROM shop.") == ["shop.stores"]
    broken = "%%mtsql\nCREATE MATERIALIZED TABLE ( broken;\nSELECT * FROM sa"
    assert complete(client, broken) == ["sales"]              # a cell that does not parse still completes


def test_columns_of_the_tables_in_scope(client):
    code = "%%mtsql\nSELECT s. FROM sales s JOIN daily_sales d ON s.ds = d.ds"
    assert complete(client, code, at="SELECT s.") == ["s.ds", "s.product_id", "s.amount"]
    assert complete(client, code + " WHERE d.t") == ["d.total"]
    bare = complete(client, "%%mtsql\nSELECT  FROM daily_sales GROUP BY ds", at="SELECT ")
    assert bare == ["ds", "total"]
    assert complete(client, "%%mtsql\nSELECT ds FROM sales WHERE am") == ["amount"]
    assert complete(client, "%%mtsql\nSELECT ds FROM sales GROUP BY pro") == ["product_id"]
    assert complete(client, "%%mtsql\nSELECT 1 FROM sales s JOIN daily_sales d ON ") == \
        ["ds", "product_id", "amount", "total"]


def test_materialized_tables_after_alter_drop_describe(client):
    for statement in ("ALTER MATERIALIZED TABLE ", "DROP MATERIALIZED TABLE IF EXISTS ",
                      "DESCRIBE MATERIALIZED TABLE "):
        assert complete(client, f"%%mtsql\n{statement}") == ["daily_sales"], statement
    assert complete(client, "%mtsql --dry-run ALTER MATERIALIZED TABLE da") == ["daily_sales"]


def test_with_option_keys_for_the_declared_partitions_and_their_values(client):
    head = "%%mtsql\nCREATE MATERIALIZED TABLE t PARTITIONED BY (ds) WITH ("
    keys = complete(client, head + "'")
    assert keys[0] == "partition.fields.ds.date-formatter" and "refresh.policy" in keys
    assert complete(client, head + "'refresh.policy' = '") == ["auto", "incremental", "full"]
    assert "yyyy-MM-dd" in complete(client, head + "'partition.fields.ds.date-formatter' = 'yyyy")
    assert "materialized-table.refresh.retries" in complete(client, "%%mtsql\nSET 'materialized-table.ref")


def test_variables_from_the_namespace_and_a_catalog_change_is_seen(client):
    run(client, "threshold = 5")
    assert complete(client, "%%mtsql\nSELECT * FROM sales WHERE amount > {{thr") == ["threshold"]
    assert complete(client, "%%mtsql\nSELECT * FROM ret") == []
    run(client, "%%mtsql\nCREATE TABLE returns (ds STRING, n INT) USING parquet")
    assert complete(client, "%%mtsql\nSELECT * FROM ret") == ["returns"]      # the cell ran: looked up again


def test_the_place_is_read_by_syntax_alone():
    """No kernel, no Spark: what the cursor may be completed with, on half-written statements."""
    from mt_magic.sql.completable import Want, place
    from mt_magic.sql.parser import expected_words

    assert expected_words("") >= {"CREATE", "ALTER", "DROP", "DESCRIBE", "SHOW", "EXPLAIN", "SET", "RESET"}
    assert expected_words("SELECT 1; EXPLAIN ") == {"ALTER", "CREATE"}
    assert expected_words("ALTER MATERIALIZED TABLE t REFRESH ") == {"PARTITION"}
    text = "SELECT x.a FROM `my db`.`t 1` AS x /* FROM other */ JOIN u ON x.id = u.id WHERE x."
    spot = place(text, len(text))
    assert (spot.want, spot.qualifier, spot.fragment) == (Want.COLUMN, "x", "x.")
    assert ("x", "my db.t 1") in spot.scope and ("u", "u") in spot.scope and "other" not in dict(spot.scope)
    second = "SELECT 1; ALTER MATERIALIZED TABLE "
    assert place(second, len(second)).want is Want.MATERIALIZED_TABLE
    quoted = "SELECT ';' AS s FROM "      # a ';' in a string ends no statement
    assert place(quoted, len(quoted)).want is Want.TABLE
    value = "CREATE MATERIALIZED TABLE t WITH ('format' = 'pa"
    spot = place(value, len(value))
    assert (spot.want, spot.option, spot.fragment) == (Want.OPTION_VALUE, "format", "pa")


def test_completing_starts_no_spark_job(client):
    """Catalog lookups only: `spark.catalog.listTables` and friends start Spark jobs (two each on PySpark
    4.3), the SHOW commands and a table's schema do not. Counted in the kernel's own thread, where the
    completion request runs, on a classic session (over Connect the server's threads run them)."""
    _, classic, _ = run(client, "from mt_magic.spark.kind import is_connect; not is_connect(spark)")
    if classic == "True":
        run(client, "spark.sparkContext.setJobGroup('mt-tab', 'completion')")
    run(client, "pass")                      # a cell ran: every name is looked up again
    assert complete(client, "%%mtsql\nSELECT s. FROM shop.stores s", at="s.") == ["s.store_id", "s.city"]
    assert "shop" in complete(client, "%%mtsql\nSELECT * FROM ")
    if classic == "True":
        _, jobs, _ = run(client, "len(spark.sparkContext.statusTracker().getJobIdsForGroup('mt-tab'))")
        run(client, "spark.sparkContext.setJobGroup(None, None)")
        assert jobs == "0"
