"""SUSPEND/RESUME, REFRESH, ALTER AS, CREATE OR ALTER, SET, DROP, SHOW and DESCRIBE (FULL mode)."""

from __future__ import annotations

import os
import re

import pytest

from helpers import table_rows, published_partitions
from mt_magic import StateError, TableNotFoundError, ValidationError

CREATE = """CREATE MATERIALIZED TABLE daily
    PARTITIONED BY (ds)
    WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
    FRESHNESS = INTERVAL '1' DAY
    AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id"""


@pytest.fixture
def daily(gw, sales):
    gw.execute(CREATE)
    return gw.describe("daily")["identifier"]


def test_suspend_and_resume_transitions(gw, daily):
    gw.execute("ALTER MATERIALIZED TABLE daily SUSPEND")
    assert gw.describe("daily")["refresh_status"] == "SUSPENDED"
    assert gw.describe("daily")["next_refresh"] is None          # the cron job is paused
    with pytest.raises(StateError, match=f"Materialized table {daily} refresh workflow has been suspended"):
        gw.execute("ALTER MATERIALIZED TABLE daily SUSPEND")
    gw.execute("ALTER MATERIALIZED TABLE daily RESUME")
    info = gw.describe("daily")
    assert info["refresh_status"] == "ACTIVATED" and info["next_refresh"] is not None
    with pytest.raises(StateError, match="refresh workflow has been resumed"):
        gw.execute("ALTER MATERIALIZED TABLE daily RESUME")


def test_resume_options_reach_scheduled_refreshes_but_never_the_table_options(gw, daily):
    gw.execute("ALTER MATERIALIZED TABLE daily SUSPEND")
    gw.execute("ALTER MATERIALIZED TABLE daily RESUME WITH ('compression' = 'gzip')")
    info = gw.describe("daily")
    assert "compression" not in info["options"]
    assert info["refresh_handler"]["dynamic_options"] == {"compression": "gzip"}
    gw.execute("ALTER MATERIALIZED TABLE daily SUSPEND; ALTER MATERIALIZED TABLE daily RESUME")
    assert gw.describe("daily")["refresh_handler"]["dynamic_options"] == {"compression": "gzip"}
    gw.refresh("daily", schedule_time="2024-01-02 00:00:00")
    storage = gw.store.get(daily).storage
    location = next((p.location for p in storage.partitions if p.spec == {"ds": "2024-01-01"}),
                    f"{storage.location}/ds=2024-01-01")       # partitions Spark discovers
    assert any(name.endswith(".gz.parquet") for name in os.listdir(location.removeprefix("file:")))


def test_refresh_statement_rewrites_only_the_partition(spark, gw, daily):
    spark.sql("INSERT INTO sales VALUES ('2024-01-01', 1, 100.0), ('2024-01-02', 1, 100.0)")
    result = gw.execute("ALTER MATERIALIZED TABLE daily REFRESH PARTITION (ds = '2024-01-02')")[-1]
    assert result.columns == ["job id", "cluster info", "rows", "partition"]
    assert result.rows[0][2] == 2 and result.rows[0][3] == "ds=2024-01-02"
    assert table_rows(spark, "daily") == {(1, 10.0, "2024-01-01"), (2, 5.0, "2024-01-01"),
                                          (1, 107.0, "2024-01-02"), (2, 1.5, "2024-01-02")}
    gw.execute("ALTER MATERIALIZED TABLE daily REFRESH")
    assert (1, 110.0, "2024-01-01") in table_rows(spark, "daily")
    assert gw.describe("daily")["last_refresh"]["outcome"] == "SUCCEEDED"


@pytest.mark.parametrize("schedule_time, partition", [
    ("2024-01-02 00:00:00", "2024-01-01"), ("2024-01-03 00:00:00", "2024-01-02")])
def test_scheduled_refresh_touches_only_the_computed_partition(spark, gw, daily, schedule_time, partition):
    spark.sql("INSERT INTO sales VALUES ('2024-01-01', 3, 1.0), ('2024-01-02', 3, 2.0)")
    before = table_rows(spark, "daily")
    result = gw.refresh("daily", schedule_time=schedule_time)
    assert result.rows[0][3] == f"ds={partition}"
    added = {(3, 1.0, "2024-01-01"), (3, 2.0, "2024-01-02")}
    assert table_rows(spark, "daily") - before == {r for r in added if r[2] == partition}


def test_scheduled_refresh_of_a_new_partition_and_of_a_vanished_one(spark, gw, daily):
    spark.sql("INSERT INTO sales VALUES ('2024-01-05', 1, 3.0)")
    gw.refresh("daily", schedule_time="2024-01-06 00:00:00")
    assert (1, 3.0, "2024-01-05") in table_rows(spark, "daily")
    kept = spark.table("sales").where("ds <> '2024-01-01'").collect()
    spark.sql("TRUNCATE TABLE sales")
    spark.createDataFrame(kept, spark.table("sales").schema).write.insertInto("sales")
    gw.refresh("daily", schedule_time="2024-01-02 00:00:00")
    assert {r[2] for r in table_rows(spark, "daily")} == {"2024-01-02", "2024-01-05"}
    partitions = published_partitions(spark, "daily")
    assert partitions == ["ds=2024-01-02", "ds=2024-01-05"]


@pytest.mark.parametrize("spec, fragment", [
    ("(nope = '1')", "The partition spec contains unknown partition keys:\n\nnope\n\nAll known partition keys are:\n\nds"),
    ("(product_id = '1')", "unknown partition keys:\n\nproduct_id"),
])
def test_refresh_partition_spec_rules(gw, daily, spec, fragment):
    with pytest.raises(ValidationError) as info:
        gw.execute(f"ALTER MATERIALIZED TABLE daily REFRESH PARTITION {spec}")
    assert fragment in str(info.value)


def test_refresh_partition_key_must_be_a_string(gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE by_product PARTITIONED BY (product_id) REFRESH_MODE = FULL "
               "AS SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    with pytest.raises(ValidationError, match="only supports referring to char, varchar and string type "
                                              "partition keys.*\n\nproduct_id"):
        gw.execute("ALTER MATERIALIZED TABLE by_product REFRESH PARTITION (product_id = 1)")


def test_failed_refresh_keeps_the_old_data_and_records_the_error(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS "
               "SELECT ds, IF(amount > 50, raise_error('too big'), amount) AS a FROM sales")
    before = table_rows(spark, "t")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 1, 99.0)")
    with pytest.raises(Exception, match="too big"):
        gw.execute("ALTER MATERIALIZED TABLE t REFRESH")
    assert table_rows(spark, "t") == before
    last = gw.describe("t")["last_refresh"]
    assert last["outcome"] == "FAILED" and "too big" in last["error"]


def test_alter_as_appends_nullable_columns(spark, gw, daily):
    gw.execute("ALTER MATERIALIZED TABLE daily AS SELECT ds, product_id, SUM(amount) AS total, "
               "COUNT(*) AS n, CAST('x' AS STRING) AS tag FROM sales GROUP BY ds, product_id")
    info = gw.describe("daily")
    assert info["columns"][3:] == [("n", "bigint", True), ("tag", "string", True)]
    assert "COUNT(*) AS n" in info["original_query"]
    assert spark.table("daily").where("n IS NOT NULL").count() == 0      # history is not rewritten
    gw.refresh("daily", schedule_time="2024-01-02 00:00:00")
    assert spark.table("daily").where("n IS NOT NULL").count() == 2      # the next refresh uses it


@pytest.mark.parametrize("query, fragment", [
    ("SELECT ds, product_id FROM sales", "drop column is unsupported. When modifying a query, you can only "
                                         "append new columns at the end of original schema. The original "
                                         "schema has 3 columns, but the newly derived schema from the query "
                                         "has 2 columns."),
    ("SELECT ds, SUM(amount) AS total, product_id FROM sales GROUP BY ds, product_id",
     "Column mismatch at position 1: Original column is [`product_id` INT], but new column is [`total` DOUBLE]."),
    ("SELECT ds, CAST(product_id AS BIGINT) AS product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id",
     "Column mismatch at position 1"),
    ("SELECT ds, product_id, SUM(amount) AS sum_total FROM sales GROUP BY ds, product_id", "Column mismatch at position 2"),
])
def test_alter_as_rules(gw, daily, query, fragment):
    before = gw.describe("daily")
    with pytest.raises(ValidationError) as info:
        gw.execute(f"ALTER MATERIALIZED TABLE daily AS {query}")
    assert fragment in str(info.value)
    assert gw.describe("daily") == before


def test_create_or_alter_creates_then_alters(spark, gw, sales):
    first = ("CREATE OR ALTER MATERIALIZED TABLE per_product FRESHNESS = INTERVAL '1' HOUR AS "
             "SELECT product_id, COUNT(*) AS event_count, SUM(amount) AS total_amount FROM sales GROUP BY product_id")
    gw.execute(first)
    assert len(gw.describe("per_product")["columns"]) == 3
    gw.execute(first.replace("SUM(amount) AS total_amount", "SUM(amount) AS total_amount, AVG(amount) AS avg_amount")
               .replace("'1' HOUR", "'2' HOUR"))
    info = gw.describe("per_product")
    assert info["columns"][-1] == ("avg_amount", "double", True)
    assert info["freshness"] == "2 HOUR" and info["refresh_handler"]["cron_expression"] == "0 0 0/2 * * ? *"
    with pytest.raises(ValidationError, match="Changing of REFRESH MODE is unsupported"):
        gw.execute(first.replace("AS\n", "REFRESH_MODE = CONTINUOUS AS\n").replace(
            "'1' HOUR AS", "'1' HOUR REFRESH_MODE = CONTINUOUS AS"))


def test_set_freshness_and_refresh_mode_reschedule(gw, daily):
    gw.execute("ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '12' HOURS")
    info = gw.describe("daily")
    assert info["freshness"] == "12 HOUR" and info["refresh_handler"]["cron_expression"] == "0 0 0/12 * * ? *"
    gw.execute("ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '10' SECOND")   # below the threshold
    assert gw.describe("daily")["refresh_mode"] == "CONTINUOUS" and not gw.pipelines.scheduler.has(daily)
    with pytest.raises(ValidationError, match="factors of 24"):
        gw.execute("ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '5' HOUR")
    gw.execute("ALTER MATERIALIZED TABLE daily SET REFRESH_MODE = FULL")
    gw.execute("ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '10' SECOND")
    info = gw.describe("daily")
    assert (info["logical_refresh_mode"], info["refresh_mode"], info["freshness"]) == ("FULL", "FULL", "10 SECOND")
    gw.execute("ALTER MATERIALIZED TABLE daily SUSPEND")
    gw.execute("ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '1' MINUTE")
    assert gw.describe("daily")["next_refresh"] is None                 # still paused


def test_set_and_reset_options(gw, daily):
    gw.execute("ALTER MATERIALIZED TABLE daily SET ('compression' = 'gzip', 'x' = '1')")
    assert gw.describe("daily")["options"]["compression"] == "gzip"
    gw.execute("ALTER MATERIALIZED TABLE daily RESET ('x', 'never-set')")
    assert "x" not in gw.describe("daily")["options"]
    for statement, fragment in [
        ("SET ()", "SET does not support empty options"),
        ("RESET ()", "RESET does not support empty key"),
        ("RESET ('connector')", "RESET does not support changing 'connector'"),
        ("SET ('format' = 'json')", "does not support changing 'format'"),
        ("SET ('partition.fields.total.date-formatter' = 'yyyy')", "isn't a partition column"),
    ]:
        with pytest.raises(ValidationError, match=fragment):
            gw.execute(f"ALTER MATERIALIZED TABLE daily {statement}")


def test_drop_rules(spark, gw, daily):
    import os
    root = gw.store.get(daily).storage.root.removeprefix("file:")
    assert os.path.isdir(root)
    gw.execute("DROP MATERIALIZED TABLE daily")
    assert gw.store.list() == [] and not spark.catalog.tableExists("daily") and not os.path.exists(root)
    assert not gw.pipelines.scheduler.has(daily)
    with pytest.raises(TableNotFoundError, match="Materialized table with identifier .*daily does not exist"):
        gw.execute("DROP MATERIALIZED TABLE daily")
    assert gw.execute("DROP MATERIALIZED TABLE IF EXISTS daily")[0].message == "Nothing to drop."
    for statement in ("DROP MATERIALIZED TABLE sales", "DROP MATERIALIZED TABLE IF EXISTS sales",
                      "ALTER MATERIALIZED TABLE sales SUSPEND"):
        with pytest.raises(ValidationError, match="is not a materialized table, does not support "
                                                  "materialized table related operation"):
            gw.execute(statement)
    assert spark.catalog.tableExists("sales")


def test_drop_table_refuses_a_materialized_table(spark, gw, daily):
    with pytest.raises(ValidationError, match="use DROP MATERIALIZED TABLE"):
        gw.execute("DROP TABLE daily")
    assert spark.catalog.tableExists("daily")
    gw.execute("DROP TABLE sales")
    assert not spark.catalog.tableExists("sales")


def test_show_materialized_tables(spark, gw, daily, db):
    gw.execute("CREATE MATERIALIZED TABLE other REFRESH_MODE = FULL AS SELECT 1 AS a")
    assert gw.execute("SHOW MATERIALIZED TABLES")[0].rows == [("daily",), ("other",)]
    assert gw.execute("SHOW MATERIALIZED TABLES")[0].columns == ["materialized table"]
    assert gw.execute(f"SHOW MATERIALIZED TABLES IN spark_catalog.{db} LIKE 'd%'")[0].rows == [("daily",)]
    assert gw.execute(f"SHOW MATERIALIZED TABLES FROM {db} NOT LIKE 'd_ily'")[0].rows == [("other",)]
    assert gw.execute("SHOW MATERIALIZED TABLES FROM default")[0].rows == []
    with pytest.raises(ValidationError, match="Database 'spark_catalog'.'nope' doesn't exist."):
        gw.execute("SHOW MATERIALIZED TABLES FROM nope")
    digits = f"9{os.getpid()}"                           # a name Spark must get quoted, this test's own
    spark.sql(f"CREATE DATABASE `{digits}`")
    try:
        assert gw.execute(f"SHOW MATERIALIZED TABLES FROM `{digits}`")[0].rows == []
    finally:
        spark.sql(f"DROP DATABASE `{digits}` CASCADE")


def test_show_create_and_describe(spark, gw, daily):
    text = gw.execute("SHOW CREATE MATERIALIZED TABLE daily")[0].rows[0][0]
    assert text.startswith(f"CREATE MATERIALIZED TABLE `spark_catalog`.`{daily.split('.')[1]}`.`daily` (")
    for fragment in ("PARTITIONED BY (`ds`)", "'partition.fields.ds.date-formatter' = 'yyyy-MM-dd'",
                     "FRESHNESS = INTERVAL '1' DAY", "REFRESH_MODE = FULL", "AS SELECT ds, product_id"):
        assert fragment in text
    rows = gw.execute("DESCRIBE daily")[0].rows
    # The columns in the order SELECT * gives them: the partition column last, as in Spark's table.
    assert [r[0] for r in rows[:rows.index(("# Partition Information", "", ""))]] == spark.table("daily").columns
    described = dict((r[0], r[1]) for r in rows)
    assert described["Freshness"] == "1 DAY" and described["Refresh Status"] == "ACTIVATED"
    assert described["Refresh Mode"] == "FULL" and "quartz_job_" in described["Refresh Handler"]
    extended = dict((r[0], r[1]) for r in gw.execute("DESCRIBE EXTENDED daily")[0].rows)
    assert "Definition Query" in extended and "Source Tables" in extended
    assert gw.execute("DESCRIBE sales")[0].columns == ["col_name", "data_type", "comment"]
    with pytest.raises(TableNotFoundError, match="Could not execute SHOW CREATE MATERIALIZED TABLE"):
        gw.execute("SHOW CREATE MATERIALIZED TABLE nope")


def test_session_set_and_reset_of_spark_confs(spark, gw, db):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    gw.execute("SET 'spark.sql.shuffle.partitions' = '7'")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
    gw.execute("RESET")
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
    with pytest.raises(ValidationError, match="is not a duration"):
        gw.execute("SET 'materialized-table.refresh-mode.freshness-threshold' = 'soon'")


def test_a_failing_statement_stops_the_rest(gw, sales):
    with pytest.raises(StateError):
        gw.execute("CREATE MATERIALIZED TABLE a REFRESH_MODE = FULL AS SELECT 1 AS x; "
                   "ALTER MATERIALIZED TABLE a SUSPEND; ALTER MATERIALIZED TABLE a SUSPEND; "
                   "CREATE MATERIALIZED TABLE b REFRESH_MODE = FULL AS SELECT 1 AS x")
    assert [t.name for t in gw.store.list()] == ["a"]


@pytest.mark.parametrize("statement, instead", [
    ("INSERT INTO daily VALUES (9, 9.0, '2024-01-09')", "ALTER MATERIALIZED TABLE … REFRESH"),
    ("INSERT OVERWRITE TABLE {db}.daily SELECT * FROM {db}.daily", "ALTER MATERIALIZED TABLE … REFRESH"),
    ("TRUNCATE TABLE daily", "ALTER MATERIALIZED TABLE … REFRESH"),
    ("ALTER TABLE `daily` RENAME TO other", "drop it and create it"),
    ("ALTER TABLE daily SET LOCATION '/tmp/elsewhere'", "ALTER MATERIALIZED TABLE … SET"),
    ("ALTER TABLE daily ADD COLUMNS (z INT)", "ALTER MATERIALIZED TABLE … AS"),
])
def test_spark_statements_that_write_a_materialized_table_are_refused(spark, gw, daily, db, statement, instead):
    before = table_rows(spark, "daily")
    with pytest.raises(ValidationError, match=rf"\.daily is a materialized table: .*{re.escape(instead)}"):
        gw.execute(statement.format(db=db))
    assert table_rows(spark, "daily") == before
    gw.execute("INSERT INTO sales VALUES ('2024-01-09', 9, 9.0)")      # other tables: Spark's own


KEYED = ("CREATE MATERIALIZED TABLE keyed (PRIMARY KEY (product_id) NOT ENFORCED) PARTITIONED BY (ds) "
         "FRESHNESS = INTERVAL '1' DAY AS SELECT ds, product_id, SUM(amount) AS total FROM sales "
         "GROUP BY ds, product_id")
KEYED_QUERY = "SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id"


@pytest.fixture
def keyed(gw, sales):
    """A keyed table whose key column the Spark source reports nullable (spec §4.5, §3.8)."""
    gw.execute(KEYED)
    assert gw.describe("keyed")["columns"][1] == ("product_id", "int", False)


def test_alter_as_on_a_keyed_table_keeps_the_key_and_appends_nullable_columns(spark, gw, keyed):
    gw.execute("ALTER MATERIALIZED TABLE keyed AS SELECT ds, product_id, SUM(amount) AS total, "
               "COUNT(*) AS n FROM sales GROUP BY ds, product_id")
    info = gw.describe("keyed")
    assert info["primary_key"] == ["product_id"]
    assert info["columns"][1:] == [("product_id", "int", False), ("total", "double", True), ("n", "bigint", True)]


def test_alter_as_renames_a_repeated_output_name(spark, gw, keyed):
    gw.execute("ALTER MATERIALIZED TABLE keyed AS SELECT ds, product_id, SUM(amount) AS total, "
               "MAX(amount) AS total FROM sales GROUP BY ds, product_id")
    assert gw.describe("keyed")["columns"][-1] == ("total0", "double", True)
    gw.execute("ALTER MATERIALIZED TABLE keyed REFRESH")
    assert table_rows(spark, "keyed") == {tuple(r) for r in spark.sql(
        "SELECT product_id, SUM(amount), MAX(amount), ds FROM sales GROUP BY ds, product_id").collect()}


def test_create_or_alter_with_a_column_list_and_no_key_drops_the_key(gw, keyed):
    gw.execute(f"CREATE OR ALTER MATERIALIZED TABLE keyed (ds STRING, product_id INT NOT NULL, total DOUBLE) "
               f"PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' DAY AS {KEYED_QUERY}")
    info = gw.describe("keyed")
    assert info["primary_key"] is None
    assert info["columns"][1] == ("product_id", "int", False)        # declared NOT NULL: it stays so


def test_create_or_alter_without_a_schema_part_keeps_the_key_and_the_partitioning(gw, keyed):
    before = gw.describe("keyed")
    [result] = gw.execute(f"CREATE OR ALTER MATERIALIZED TABLE keyed FRESHNESS = INTERVAL '1' DAY AS {KEYED_QUERY}")
    assert result.message.endswith("is unchanged.")
    assert gw.describe("keyed") == before
    gw.execute(f"CREATE OR ALTER MATERIALIZED TABLE keyed FRESHNESS = INTERVAL '1' DAY AS "
               f"{KEYED_QUERY.replace(' FROM', ', COUNT(*) AS n FROM')}")
    info = gw.describe("keyed")
    assert (info["primary_key"], info["partition_keys"]) == (["product_id"], ["ds"])
    assert info["columns"][-1] == ("n", "bigint", True)
