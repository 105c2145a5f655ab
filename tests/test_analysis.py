"""Query analysis: source tables and the qualified definition text, the same in both kinds of session.

The suite runs once on a classic session and once over Spark Connect; both runs must give exactly
these answers (classic: Spark's parser in the JVM; Connect: EXPLAIN's parsed plan and our tokenizer).
"""

from __future__ import annotations

import pytest

from mt_magic import ValidationError
from mt_magic.spark.analysis import QueryAnalyzer
from mt_magic.spark.tables import TableLookup, lookup_table
from mt_magic.spark.commands import command_rows
from mt_magic.spark.frames import query_frame, query_over
from mt_magic.spark.query_plans import analysed_operators


@pytest.fixture
def analyzer(spark, db):
    spark.sql("CREATE TABLE sales (ds STRING, product_id INT, amount DOUBLE) USING parquet")
    spark.sql("CREATE TABLE users (id INT, name STRING) USING parquet")
    spark.sql("CREATE DATABASE IF NOT EXISTS analysis_other")
    spark.sql("CREATE TABLE IF NOT EXISTS analysis_other.t2 (id INT) USING parquet")
    spark.sql("CREATE VIEW v AS SELECT ds, amount FROM sales")
    return QueryAnalyzer(spark)


def q(db: str, name: str) -> str:
    return f"`spark_catalog`.`{db}`.`{name}`"


# (query, sources by table name, definition) — {s}, {u}, {v}, {t2} stand for the qualified names.
CASES = [
    ("SELECT * FROM sales", ["sales"], "SELECT * FROM {s}"),
    ("SELECT s.ds FROM sales s JOIN users u ON s.product_id = u.id", ["sales", "users"],
     "SELECT s.ds FROM {s} s JOIN {u} u ON s.product_id = u.id"),
    ("WITH sales AS (SELECT * FROM sales WHERE amount > 1) SELECT * FROM sales", ["sales"],
     "WITH sales AS (SELECT * FROM {s} WHERE amount > 1) SELECT * FROM sales"),
    ("WITH x AS (SELECT * FROM users) SELECT * FROM x JOIN sales ON x.id = sales.product_id",
     ["users", "sales"], "WITH x AS (SELECT * FROM {u}) SELECT * FROM x JOIN {s} ON x.id = sales.product_id"),
    ("SELECT * FROM (SELECT * FROM sales) AS sub", ["sales"], "SELECT * FROM (SELECT * FROM {s}) AS sub"),
    ("SELECT * FROM sales WHERE product_id IN (SELECT id FROM users)", ["sales", "users"],
     "SELECT * FROM {s} WHERE product_id IN (SELECT id FROM {u})"),
    ("SELECT * FROM sales WHERE EXISTS (SELECT 1 FROM users WHERE users.id = sales.product_id)",
     ["sales", "users"], "SELECT * FROM {s} WHERE EXISTS (SELECT 1 FROM {u} WHERE users.id = sales.product_id)"),
    ("SELECT * FROM {db}.sales", ["sales"], "SELECT * FROM {s}"),
    ("SELECT * FROM spark_catalog.{db}.sales", ["sales"], "SELECT * FROM {s}"),
    ("SELECT * FROM `sales`", ["sales"], "SELECT * FROM {s}"),
    ("SELECT * FROM SALES", ["sales"], "SELECT * FROM {s}"),
    ("SELECT * FROM analysis_other.t2", ["t2"], "SELECT * FROM {t2}"),
    ("SELECT * FROM v", ["v"], "SELECT * FROM {v}"),
    ("SELECT * FROM sales, users WHERE sales.product_id = users.id", ["sales", "users"],
     "SELECT * FROM {s}, {u} WHERE sales.product_id = users.id"),
    ("SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds HAVING SUM(amount) > (SELECT MIN(amount) FROM sales)",
     ["sales"], "SELECT ds, SUM(amount) AS total FROM {s} GROUP BY ds HAVING SUM(amount) > "
                "(SELECT MIN(amount) FROM {s})"),
    ("SELECT * FROM sales /* FROM users */ -- FROM users\n", ["sales"],
     "SELECT * FROM {s} /* FROM users */ -- FROM users\n"),
    ("SELECT 'FROM users' AS s FROM sales", ["sales"], "SELECT 'FROM users' AS s FROM {s}"),
    ("SELECT * FROM sales LATERAL VIEW explode(array(1, 2)) t AS users", ["sales"],
     "SELECT * FROM {s} LATERAL VIEW explode(array(1, 2)) t AS users"),
    ("SELECT * FROM sales TABLESAMPLE (50 PERCENT)", ["sales"], "SELECT * FROM {s} TABLESAMPLE (50 PERCENT)"),
    ("SELECT id FROM range(10)", [], "SELECT id FROM range(10)"),
    ("SELECT * FROM sales UNION ALL SELECT * FROM sales", ["sales"], "SELECT * FROM {s} UNION ALL SELECT * FROM {s}"),
    ("SELECT * FROM VALUES (1, 'a') AS t(x, y)", [], "SELECT * FROM VALUES (1, 'a') AS t(x, y)"),
    ("TABLE sales", ["sales"], "TABLE {s}"),
    ("FROM sales SELECT ds", ["sales"], "FROM {s} SELECT ds"),
    ("SELECT upper(ds) AS users FROM sales", ["sales"], "SELECT upper(ds) AS users FROM {s}"),
    ("WITH a AS (SELECT * FROM sales), b AS (SELECT * FROM a JOIN users ON a.product_id = users.id) "
     "SELECT * FROM b", ["sales", "users"],
     "WITH a AS (SELECT * FROM {s}), b AS (SELECT * FROM a JOIN {u} ON a.product_id = users.id) SELECT * FROM b"),
    ("SELECT * FROM sales AS s LEFT JOIN (SELECT * FROM users) u ON s.product_id = u.id", ["sales", "users"],
     "SELECT * FROM {s} AS s LEFT JOIN (SELECT * FROM {u}) u ON s.product_id = u.id"),
    ("SELECT * FROM (WITH users AS (SELECT 1 AS id) SELECT * FROM users) x JOIN users USING (id)", ["users"],
     "SELECT * FROM (WITH users AS (SELECT 1 AS id) SELECT * FROM users) x JOIN {u} USING (id)"),
    ("SELECT *\nFROM\n  sales\n  JOIN users\n    ON sales.product_id = users.id", ["sales", "users"],
     "SELECT *\nFROM\n  {s}\n  JOIN {u}\n    ON sales.product_id = users.id"),
]


@pytest.mark.parametrize("query, sources, definition", CASES, ids=[str(i) for i in range(len(CASES))])
def test_sources_and_qualified_text(analyzer, db, query, sources, definition):
    names = {"s": q(db, "sales"), "u": q(db, "users"), "v": q(db, "v"), "t2": q("analysis_other", "t2")}
    full = {"sales": f"spark_catalog.{db}.sales", "users": f"spark_catalog.{db}.users",
            "v": f"spark_catalog.{db}.v", "t2": "spark_catalog.analysis_other.t2"}
    analyzed = analyzer.analyze(query.replace("{db}", db))
    assert analyzed.sources == tuple(full[n] for n in sources)
    assert analyzed.definition_query == definition.format(**names)


def test_temporary_objects_are_refused(spark, analyzer):
    spark.createDataFrame([(1,)], "id INT").createOrReplaceTempView("recent")
    with pytest.raises(ValidationError, match="temporary view recent"):
        analyzer.analyze("SELECT * FROM recent JOIN users USING (id)")
    spark.udf.register("plus_one", lambda x: x + 1, "int")
    with pytest.raises(ValidationError, match="temporary function plus_one"):
        analyzer.analyze("SELECT plus_one(id) AS x FROM users")


def test_temporary_views_are_found_in_the_analysed_plan(spark, analyzer, db):
    spark.sql("CREATE TEMPORARY VIEW sales AS SELECT 'x' AS ds")          # shadows the table
    with pytest.raises(ValidationError, match="temporary view sales"):
        analyzer.analyze("SELECT * FROM sales")
    assert analyzer.analyze(f"SELECT * FROM {db}.sales").sources == (f"spark_catalog.{db}.sales",)
    spark.sql("CREATE TEMPORARY VIEW `odd``name.v` AS SELECT * FROM users")
    spark.sql("CREATE TEMPORARY VIEW outer_v AS SELECT * FROM `odd``name.v`")
    with pytest.raises(ValidationError, match="temporary view outer_v"):
        analyzer.analyze("SELECT id FROM users WHERE id IN (SELECT id FROM outer_v)")
    spark.sql("CREATE OR REPLACE GLOBAL TEMPORARY VIEW gv AS SELECT 1 AS id")
    with pytest.raises(ValidationError, match="temporary view global_temp.gv"):
        analyzer.analyze("SELECT * FROM global_temp.gv")
    assert analyzer.analyze("SELECT * FROM v").sources == (f"spark_catalog.{db}.v",)   # a persistent view


def test_temporary_functions_among_builtins(spark, analyzer):
    spark.udf.register("plus_two", lambda x: x + 2, "int")
    assert analyzer.analyze("SELECT upper(name) AS n, COUNT(*) AS c FROM users GROUP BY name").sources
    with pytest.raises(ValidationError, match="temporary function plus_two"):
        analyzer.analyze("WITH w AS (SELECT plus_two(id) AS x FROM users) SELECT x FROM w")


def test_current_database_that_needs_quotes(spark, analyzer, db):
    """Spark quotes an all-digit name when it shows the current namespace."""
    spark.sql("CREATE DATABASE IF NOT EXISTS `2024`")
    spark.sql("CREATE TABLE IF NOT EXISTS `2024`.t (id INT) USING parquet")
    spark.sql("USE `2024`")
    try:
        assert analyzer.current() == ("spark_catalog", "2024")
        assert analyzer.analyze("SELECT * FROM t").sources == ("spark_catalog.2024.t",)
    finally:
        spark.catalog.setCurrentDatabase(db)


@pytest.mark.parametrize("query, sources", [
    ("SELECT * FROM sales s JOIN users ON s.product_id = users.id", ["sales", "users"]),
    ("WITH x AS (SELECT * FROM users) SELECT * FROM x, sales", ["users", "sales"]),
    ("SELECT product_id FROM sales UNION ALL SELECT id FROM spark_catalog.analysis_other.t2", ["sales", "t2"]),
    ("SELECT * FROM analysis_other.t2", []),          # a two-part name is a question of its own
])
def test_guessed_sources_are_the_analysed_ones_where_the_tokenizer_can_tell(analyzer, db, query, sources):
    """What a CREATE asks the catalog about before Spark's analysis answers: the same sources."""
    expected = tuple(f"spark_catalog.{'analysis_other' if n == 't2' else db}.{n}" for n in sources)
    with analyzer.pinned():
        assert analyzer.guessed_sources(query) == expected
    if expected:
        assert analyzer.analyze(query).sources == expected


def test_operators_outside_a_named_relation(spark, analyzer):
    """Judging a delta rule: what the output over a state adds, not what the state holds."""
    state = query_frame(spark, "SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    cases = {"SELECT * FROM probe_rel": set(),
             "SELECT product_id, total, RANK() OVER (ORDER BY total) AS r FROM probe_rel": {"Window"},
             "SELECT MAX(total) AS m FROM probe_rel": {"Aggregate"},
             "SELECT a.total FROM probe_rel a JOIN probe_rel b ON a.product_id = b.product_id": set()}
    for query, expected in cases.items():
        with query_over(spark, query, {"probe_rel": state}) as out:
            assert analysed_operators(out, outside="probe_rel") & {"Aggregate", "Window"} == expected, query
            assert "Aggregate" in analysed_operators(out), query     # the state's own, when asked whole


def test_pinned_statement_asks_the_session_once(spark, analyzer, db):
    with analyzer.pinned():
        assert analyzer.current() == ("spark_catalog", db)
        spark.catalog.setCurrentDatabase("analysis_other")
        assert analyzer.current() == ("spark_catalog", db)
    assert analyzer.current() == ("spark_catalog", "analysis_other")
    spark.catalog.setCurrentDatabase(db)


def test_table_lookup(spark, analyzer, db):
    spark.sql("CREATE TABLE `1999` (id INT) USING parquet")
    spark.sql("CREATE TEMPORARY VIEW only_temp AS SELECT 1 AS id")
    cases = {"sales": TableLookup.EXISTS, "v": TableLookup.EXISTS, "1999": TableLookup.EXISTS,
             "199": TableLookup.MISSING, "a(b*": TableLookup.MISSING, "sale": TableLookup.MISSING, "only_temp": TableLookup.MISSING}
    for name, expected in cases.items():
        assert lookup_table(spark, "spark_catalog", db, name) is expected, name
    assert lookup_table(spark, "spark_catalog", "no_such_db", "sales") is TableLookup.NO_DATABASE


def test_command_rows_are_the_rows_spark_returns(spark, analyzer, db):
    for command in ("SHOW TABLES", "DESCRIBE TABLE EXTENDED sales", "SHOW USER FUNCTIONS",
                    "SHOW CURRENT NAMESPACE"):
        assert command_rows(spark, command) == [tuple(r) for r in spark.sql(command).collect()], command


def test_only_queries_are_analysed(spark, analyzer):
    with pytest.raises(ValidationError, match="must be a query"):
        analyzer.analyze("WITH a AS (SELECT 1 AS id) INSERT INTO users SELECT id, 'x' FROM a")
    assert spark.table("users").count() == 0


def test_streaming_text_marks_every_source_but_the_static_ones(analyzer, db):
    text = analyzer.analyze("SELECT s.ds, users.name FROM sales s JOIN users ON s.product_id = users.id").definition_query
    streaming = analyzer.streaming_query(text, {f"spark_catalog.{db}.users"})
    assert streaming == f"SELECT s.ds, users.name FROM STREAM({q(db, 'sales')}) s JOIN {q(db, 'users')} ON " \
                        "s.product_id = users.id"
