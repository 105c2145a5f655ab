"""CREATE MATERIALIZED TABLE on a real SparkSession: seed 003's examples and Flink's rules."""

from __future__ import annotations

import os

import pytest

from helpers import table_rows, published_partitions
from mt_magic import ExecutionError, MaterializedTableError, ValidationError


def test_partitioned_full_table_with_date_formatter(spark, gw, sales):
    result = gw.execute("""CREATE MATERIALIZED TABLE daily_sales
        PARTITIONED BY (ds)
        WITH ('format' = 'json', 'partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
        FRESHNESS = INTERVAL '1' HOUR
        AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id""")[-1]
    assert "refresh mode FULL" in result.message and result.rows == []
    info = gw.describe("daily_sales")
    assert info["identifier"].endswith(".daily_sales") and info["identifier"].startswith("spark_catalog.")
    assert info["columns"] == [("ds", "string", True), ("product_id", "int", True), ("total", "double", True)]
    assert (info["freshness"], info["logical_refresh_mode"], info["refresh_mode"], info["refresh_status"]) == (
        "1 HOUR", "AUTOMATIC", "FULL", "ACTIVATED")
    assert info["refresh_handler"]["cron_expression"] == "0 0 0/1 * * ? *"
    assert info["partition_keys"] == ["ds"] and info["source_tables"][0].endswith(".sales")
    assert "`spark_catalog`." in info["definition_query"] and info["original_query"].startswith("SELECT ds")
    assert table_rows(spark, "daily_sales") == {(1, 7.0, "2024-01-02"), (1, 10.0, "2024-01-01"),
                                                 (2, 1.5, "2024-01-02"), (2, 5.0, "2024-01-01")}
    location = spark.sql("DESCRIBE EXTENDED daily_sales").where("col_name = 'Provider'").first().data_type
    assert location == "json"
    partitions = published_partitions(spark, "daily_sales")
    assert partitions == ["ds=2024-01-01", "ds=2024-01-02"]


def test_product_sales_left_join_of_seed_003(spark, gw, db):
    spark.sql("CREATE TABLE product_table (ds STRING, product_id INT, product_name STRING, category STRING) "
              "USING parquet")
    spark.sql("CREATE TABLE sales_table (product_id INT, sale_price DOUBLE, quantity INT) USING parquet")
    spark.sql("INSERT INTO product_table VALUES ('2024-06-28', 1, 'phone', 'electronics'), "
              "('2024-06-28', 2, 'tv', 'electronics'), ('2024-06-28', 3, 'apple', 'food')")
    spark.sql("INSERT INTO sales_table VALUES (1, 100.0, 2), (1, 200.0, 1)")
    gw.execute(f"""CREATE MATERIALIZED TABLE my_materialized_table_full
        PARTITIONED BY (ds)
        WITH ('format' = 'json', 'partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
        FRESHNESS = INTERVAL '1' HOUR
        AS SELECT p.ds, p.product_id, p.product_name, AVG(s.sale_price) AS avg_sale_price,
                  SUM(s.quantity) AS total_quantity
        FROM {db}.product_table p LEFT JOIN sales_table s ON p.product_id = s.product_id
        WHERE p.category = 'electronics'
        GROUP BY p.ds, p.product_id, p.product_name""")
    assert table_rows(spark, "my_materialized_table_full") == {
        (1, "phone", 150.0, 3, "2024-06-28"), (2, "tv", None, None, "2024-06-28")}
    sources = gw.describe("my_materialized_table_full")["source_tables"]
    assert sorted(s.rsplit(".", 1)[1] for s in sources) == ["product_table", "sales_table"]


def test_column_name_list_reorders_by_name(spark, gw, sales):
    gw.execute("""CREATE MATERIALIZED TABLE t (total, ds, product_id) REFRESH_MODE = FULL
                  AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id""")
    assert [c[0] for c in gw.describe("t")["columns"]] == ["total", "ds", "product_id"]
    assert spark.table("t").columns == ["total", "ds", "product_id"]
    assert (10.0, "2024-01-01", 1) in table_rows(spark, "t")


def test_typed_column_list_casts_and_keeps_query_order(spark, gw, sales):
    gw.execute("""CREATE MATERIALIZED TABLE t (product_id BIGINT NOT NULL, ds STRING,
                      total DOUBLE, CONSTRAINT pk PRIMARY KEY (product_id, ds) NOT ENFORCED)
                  REFRESH_MODE = FULL
                  AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id""")
    info = gw.describe("t")
    assert info["columns"] == [("ds", "string", False), ("product_id", "bigint", False), ("total", "double", True)]
    assert info["primary_key"] == ["product_id", "ds"]
    assert dict((f.name, f.dataType.simpleString()) for f in spark.table("t").schema)["product_id"] == "bigint"


def test_typed_definition_order_follows_the_query(gw, db):
    gw.execute("CREATE MATERIALIZED TABLE t (user_id INT, shop_id BIGINT) REFRESH_MODE = FULL "
               "AS SELECT 1 AS shop_id, 2 AS user_id")
    # the declared nullability wins: both become nullable although the query's are NOT NULL
    assert gw.describe("t")["columns"] == [("shop_id", "bigint", True), ("user_id", "int", True)]


def test_computed_column_comes_first_and_is_stored(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t (doubled AS total * 2, total DOUBLE) REFRESH_MODE = FULL "
               "AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    assert [c[0] for c in gw.describe("t")["columns"]] == ["doubled", "ds", "total"]
    assert (30.0, "2024-01-01", 15.0) in table_rows(spark, "t")


@pytest.mark.parametrize("columns, fragment", [
    ("(a, b)", "The number of columns in the column list must match"),
    ("(ds, id, total)", "Column 'id' not found in the source schema."),
    ("(ds STRING, missing INT)", "physical column `missing` could not be found in the query"),
    ("(product_id STRING)", "Incompatible types for sink column 'product_id' at position 1. The source "
                            "column has type 'INT', while the target column has type 'STRING'."),
    ("(ds DATE)", "Incompatible types for sink column 'ds'"),
    ("(total INT)", "Incompatible types for sink column 'total'"),
    ("(m TIMESTAMP METADATA VIRTUAL)", "VIRTUAL METADATA"),
    ("(ds FOO)", "unknown data type 'FOO'"),
    ("(PRIMARY KEY (nope) NOT ENFORCED)", "Primary key column 'nope' not defined in the query schema"),
    ("(doubled AS total * 2, PRIMARY KEY (doubled) NOT ENFORCED)",
     "Could not create a PRIMARY KEY with nullable column 'doubled'"),
    ("(ds, product_id, total, WATERMARK FOR ts AS ts)", "The rowtime attribute field 'ts' is not defined"),
])
def test_schema_rules(spark, gw, sales, store_path, columns, fragment):
    with pytest.raises(ValidationError) as info:
        gw.execute(f"CREATE MATERIALIZED TABLE t {columns} REFRESH_MODE = FULL "
                   "AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id")
    assert fragment in str(info.value)
    assert_nothing_left(spark, gw)


def assert_nothing_left(spark, gw):
    assert gw.store.list() == []
    assert not spark.catalog.tableExists("t")
    data = os.path.join(gw.store.home, "data")
    assert not os.path.exists(data) or not any(files for _, _, files in os.walk(data))


@pytest.mark.parametrize("clauses, fragment", [
    ("PARTITIONED BY (e)", "Partition column 'e' not defined in the query's schema. Available columns: "
                           "['ds', 'product_id', 'total']."),
    ("WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')",
     "Column 'ds' referenced by materialized table option 'partition.fields.ds.date-formatter' isn't a "
     "partition column. Available partition columns: ['']."),
    ("PARTITIONED BY (product_id) WITH ('partition.fields.product_id.date-formatter' = 'yyyy')",
     "only supports referring to char, varchar and string type partition column. Column `product_id` "
     "type is INT."),
    ("PARTITIONED BY (ds) WITH ('partition.fields.ds.date-formatter' = 'EEE')", "uses 'EEE'"),
    ("WITH ('format' = 'avro')", "Option 'format' = 'avro': Spark has no data source"),
    ("WITH ('connector' = 'kafka')", "Option 'connector' = 'kafka' is not supported"),
    ("FRESHNESS = INTERVAL '0' SECOND", "only supports positive integer type values. But was: 0"),
    ("FRESHNESS = INTERVAL '1' MONTH", "as the time unit"),
    ("FRESHNESS = INTERVAL '40' MINUTE", "only freshness that are factors of 60"),
    ("FRESHNESS = INTERVAL '2' DAY REFRESH_MODE = FULL", "freshness must be 1 when the time unit is DAY"),
])
def test_validation_rules(spark, gw, sales, clauses, fragment):
    with pytest.raises(ValidationError) as info:
        gw.execute(f"CREATE MATERIALIZED TABLE t {clauses} "
                   "AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id")
    assert fragment in str(info.value)
    assert_nothing_left(spark, gw)


def test_temporary_views_and_functions_are_rejected(spark, gw, sales):
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW recent AS SELECT * FROM sales")
    with pytest.raises(ValidationError, match="temporary view recent"):
        gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM recent")
    spark.udf.register("plus_one", lambda x: x + 1, "int")
    with pytest.raises(ValidationError, match="temporary function plus_one"):
        gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT plus_one(product_id) AS p FROM sales")
    assert_nothing_left(spark, gw)


def test_cte_and_subquery_names_are_qualified(gw, sales, db):
    gw.execute("""CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS
        WITH recent AS (SELECT * FROM sales WHERE ds >= '2024-01-02')
        SELECT r.product_id, (SELECT MAX(amount) FROM sales) AS top FROM recent r""")
    definition = gw.describe("t")["definition_query"]
    assert definition.count(f"`spark_catalog`.`{db}`.`sales`") == 2 and "FROM recent r" in definition


def test_existing_names_and_missing_sources(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    with pytest.raises(ValidationError, match="already exists"):
        gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    with pytest.raises(ValidationError, match="already exists and is not a materialized table"):
        gw.execute("CREATE MATERIALIZED TABLE sales REFRESH_MODE = FULL AS SELECT 1 AS a")
    with pytest.raises(ValidationError, match="Regular table does not support create or alter operation"):
        gw.execute("CREATE OR ALTER MATERIALIZED TABLE sales REFRESH_MODE = FULL AS SELECT 1 AS a")
    with pytest.raises(MaterializedTableError, match="TABLE_OR_VIEW_NOT_FOUND"):
        gw.execute("CREATE MATERIALIZED TABLE u REFRESH_MODE = FULL AS SELECT * FROM nope")
    with pytest.raises(ValidationError, match="Database 'spark_catalog'.'nodb' doesn't exist"):
        gw.execute("CREATE MATERIALIZED TABLE nodb.u REFRESH_MODE = FULL AS SELECT 1 AS a")
    # the name is checked beside the query's analysis; its error still comes first
    with pytest.raises(ValidationError, match="already exists and is not a materialized table"):
        gw.execute("CREATE MATERIALIZED TABLE sales REFRESH_MODE = FULL AS SELECT * FROM nope")
    with pytest.raises(ValidationError, match="Database 'spark_catalog'.'nodb' doesn't exist"):
        gw.execute("CREATE MATERIALIZED TABLE nodb.u REFRESH_MODE = FULL AS SELECT no_such_column")
    with pytest.raises(ValidationError, match="reads the table itself"):
        gw.execute("CREATE OR ALTER MATERIALIZED TABLE t AS SELECT * FROM t")
    assert [t.name for t in gw.store.list()] == ["t"]


def test_failed_initial_refresh_is_rolled_back_and_names_the_step(spark, gw, sales):
    with pytest.raises(ExecutionError) as info:
        gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS "
                   "SELECT ds, IF(amount > 6, raise_error('bad row'), amount) AS a FROM sales")
    assert "while running the initial refresh" in str(info.value) and "bad row" in str(info.value)
    assert_nothing_left(spark, gw)
    assert not gw.pipelines.scheduler.has(f"spark_catalog.{spark.catalog.currentDatabase()}.t")


def test_on_schedule_initialization_waits_for_the_first_fire(spark, gw, sales):
    gw.execute("SET 'materialized-table.full.initialize' = 'on-schedule'")
    gw.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    assert spark.table("t").count() == 0 and gw.describe("t")["refresh_status"] == "ACTIVATED"
    gw.execute("RESET 'materialized-table.full.initialize'")
    gw.execute("CREATE MATERIALIZED TABLE u REFRESH_MODE = FULL AS SELECT * FROM sales")
    assert spark.table("u").count() == 4


def test_threshold_and_defaults_from_config_and_set(spark, db, sales, store_path):
    from mt_magic import Gateway
    with Gateway(spark, catalog_store=store_path,
                 config={"materialized-table.refresh-mode.freshness-threshold": "10 s"}) as gateway:
        gateway.execute("CREATE MATERIALIZED TABLE a FRESHNESS = INTERVAL '10' SECOND AS SELECT * FROM sales")
        assert gateway.describe("a")["refresh_mode"] == "FULL"
        gateway.execute("SET 'materialized-table.default-freshness.full' = '2 h'")
        gateway.execute("CREATE MATERIALIZED TABLE b REFRESH_MODE = FULL AS SELECT * FROM sales")
        assert gateway.describe("b")["freshness"] == "2 HOUR"


def test_table_options_reach_the_data_source(spark, gw, sales, tmp_path):
    path = tmp_path / "csv_table"
    gw.execute(f"CREATE MATERIALIZED TABLE t WITH ('connector' = 'filesystem', 'format' = 'csv', "
               f"'header' = 'true', 'path' = '{path}') REFRESH_MODE = FULL AS SELECT * FROM sales")
    files = [f for _, _, names in os.walk(path) for f in names if f.endswith(".csv")]
    assert files
    first = next(open(os.path.join(d, f)).readline() for d, _, names in os.walk(path) for f in names
                 if f.endswith(".csv"))
    assert first.strip() == "ds,product_id,amount"
    assert spark.table("t").count() == 4


def test_injection_attempts_stay_literal(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t COMMENT 'it''s \\\\ fine' PARTITIONED BY (ds) "
               "REFRESH_MODE = FULL AS SELECT * FROM sales")
    assert gw.describe("t")["comment"] == "it's \\ fine"
    before = table_rows(spark, "t")
    gw.execute("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = 'x'' OR ''1''=''1')")
    assert table_rows(spark, "t") == before
    with pytest.raises(MaterializedTableError, match="we'ird"):
        gw.execute("CREATE MATERIALIZED TABLE `we'ird` REFRESH_MODE = FULL AS SELECT * FROM sales")
    assert [t.name for t in gw.store.list()] == ["t"]


@pytest.mark.parametrize("name", ["`../../../../escape`", "`a/b`", "`..`", "`x\\\\y`"])
def test_a_name_never_becomes_a_path_out_of_the_data_directory(gw, sales, tmp_path, name):
    before = sorted(str(p) for p in tmp_path.parent.rglob("*"))
    for statement in (f"CREATE MATERIALIZED TABLE {name} REFRESH_MODE = FULL AS SELECT * FROM sales",
                      f"CREATE TABLE {name} AS SELECT * FROM sales"):
        with pytest.raises(ValidationError, match="a name part may not be"):
            gw.execute(statement)
    assert sorted(str(p) for p in tmp_path.parent.rglob("*")) == before      # no folder made anywhere


@pytest.mark.parametrize("name, part", [("`daily.revenue`", "daily.revenue"), ("ünï", "ünï"), ("`a b`", "a b")])
def test_a_name_the_session_catalog_refuses_is_refused_by_the_plan(gw, sales, db, name, part):
    """Spark refuses such a name only when the table is created (after a dry run said valid, and the
    initial refresh's work); the plan refuses it first, with the rule, the name quoted."""
    for dry_run in (True, False):
        with pytest.raises(ValidationError) as refused:
            gw.execute(f"CREATE MATERIALIZED TABLE {name} REFRESH_MODE = FULL AS SELECT * FROM sales",
                       dry_run=dry_run)
        assert str(refused.value) == (
            f"Table name `spark_catalog`.`{db}`.`{part}`: `{part}` is not a name Spark's session catalog "
            "'spark_catalog' takes; its database and table names hold only the letters a-z and A-Z, digits "
            "and '_'.")
    assert gw.store.list() == []


def test_a_primary_key_over_a_spark_source_is_not_null_by_declaration(spark, gw, db):
    spark.sql("CREATE TABLE src (id INT, name STRING, amount DOUBLE, ds STRING) USING parquet")
    spark.sql("INSERT INTO src VALUES (1, 'a', 1.0, '2024-01-01'), (2, 'b', 2.0, '2024-01-02')")
    gw.execute("CREATE MATERIALIZED TABLE keyed (PRIMARY KEY (id) NOT ENFORCED) PARTITIONED BY (ds) "
               "WITH ('format' = 'parquet') REFRESH_MODE = FULL AS SELECT * FROM src")
    described = gw.describe("keyed")
    assert described["primary_key"] == ["id"] and ("id", "int", False) in described["columns"]
    gw.execute("CREATE OR ALTER MATERIALIZED TABLE keyed (PRIMARY KEY (id) NOT ENFORCED) PARTITIONED BY (ds) "
               "WITH ('format' = 'parquet') AS SELECT * FROM src")
    gw.execute("ALTER MATERIALIZED TABLE keyed SET ('compression' = 'gzip')")
    before = table_rows(spark, "keyed")
    spark.sql("INSERT INTO src VALUES (NULL, 'c', 3.0, '2024-01-03')")
    with pytest.raises(MaterializedTableError, match="Column 'id' of spark_catalog.*keyed is NOT NULL"):
        gw.execute("ALTER MATERIALIZED TABLE keyed REFRESH")
    assert table_rows(spark, "keyed") == before                      # nothing published
