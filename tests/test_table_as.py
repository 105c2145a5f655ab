"""CREATE TABLE AS / CREATE OR REPLACE TABLE AS and save_as(): FLIP-218 with drop on failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from pyspark.errors import AnalysisException

from mt_magic import Gateway, MaterializedTableError, parse, save_as
from mt_magic.catalog.pending import PendingWrites
from mt_magic.storage.table_as import VERSIONS_PROPERTY, table_properties
from mt_magic.spark.jobs import cancel_jobs
from mt_magic.sql import statements as st
from helpers import BRIDGE_TEXT, cancelled_throughout, table_rows

FAILING = "SELECT id, IF(id = 7, raise_error('bad row'), CAST(id % 3 AS STRING)) AS g FROM range(10)"


def tables(spark, db) -> set[str]:
    return {t.name for t in spark.catalog.listTables(db) if not t.isTemporary}


def folder_entries(spark, db) -> set[str]:
    """What the database's folder holds: managed tables' data, staging leftovers."""
    location = spark.sql(f"DESCRIBE DATABASE EXTENDED {db}").where("info_name = 'Location'").first()[1]
    path = location.replace("file:", "", 1)
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def detail(spark, table: str, key: str) -> str:
    return spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where(f"col_name = '{key}'").first()[1]


def test_spark_syntax_stays_with_spark():
    assert isinstance(parse("CREATE TABLE x USING parquet AS SELECT 1 AS a")[0], st.SparkStatement)
    assert isinstance(parse("CREATE TABLE x (a INT) USING parquet")[0], st.SparkStatement)
    statement = parse("CREATE OR REPLACE TABLE x (a BIGINT) COMMENT 'c' PARTITIONED BY (a) "
                      "WITH ('format' = 'json') AS SELECT 1 AS a")[0]
    assert isinstance(statement, st.CreateTableAs)
    assert (statement.or_replace, statement.partition_keys, statement.options, statement.query) == (
        True, ("a",), {"format": "json"}, "SELECT 1 AS a")


def test_ctas_without_with_uses_spark_default_source(spark, gw, sales, db):
    [result] = gw.execute("CREATE TABLE totals AS SELECT product_id, SUM(amount) AS total FROM sales "
                          "GROUP BY product_id")
    assert result.message == f"Created table spark_catalog.{db}.totals (parquet, 2 rows)."
    assert table_rows(spark, "totals") == {(1, 17.0), (2, 6.5)}
    assert spark.table("totals").schema == spark.sql(
        "SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id").schema
    # its data in a version folder of its own, under the table's folder (replacing it retires that)
    assert detail(spark, "totals", "Type") == "EXTERNAL"
    assert versions_of(spark, "totals")[0].endswith(f"{db}.db/totals") and len(versions_of(spark, "totals")[1]) == 1
    assert tables(spark, db) == {"sales", "totals"}


def test_ctas_partitioned_json_is_json_on_disk(spark, gw, sales, db):
    gw.execute("CREATE TABLE by_day COMMENT 'per day' PARTITIONED BY (ds) WITH ('format' = 'json') "
               "AS SELECT product_id, amount, ds FROM sales")
    assert table_rows(spark, "by_day") == {(p, a, d) for d, p, a in table_rows(spark, "sales")}
    assert [r[0] for r in spark.sql("SHOW PARTITIONS by_day").collect()] == ["ds=2024-01-01", "ds=2024-01-02"]
    location = detail(spark, "by_day", "Location").replace("file:", "", 1)
    data = [f for _, _, names in os.walk(location) for f in names if f.startswith("part-")]
    assert data and all(f.endswith(".json") for f in data)
    assert detail(spark, "by_day", "Comment") == "per day"


def test_ctas_column_lists_cast_and_reorder(spark, gw, sales):
    gw.execute("CREATE TABLE typed (product_id BIGINT NOT NULL, amount DOUBLE) AS "
               "SELECT product_id, amount FROM sales")
    assert [(f.name, f.dataType.simpleString()) for f in spark.table("typed").schema] == [
        ("product_id", "bigint"), ("amount", "double")]
    gw.execute("CREATE TABLE reordered (amount, ds, product_id) AS SELECT ds, product_id, amount FROM sales")
    assert spark.table("reordered").columns == ["amount", "ds", "product_id"]
    with pytest.raises(MaterializedTableError, match="Incompatible types for sink column 'ds'"):
        gw.execute("CREATE TABLE bad (ds INT) AS SELECT ds FROM sales")


@pytest.mark.parametrize("partitioned", ["", "PARTITIONED BY (g)"])
def test_failing_ctas_leaves_no_table_and_no_files(spark, gw, db, partitioned):
    before = folder_entries(spark, db)
    with pytest.raises(MaterializedTableError, match="bad row"):
        gw.execute(f"CREATE TABLE broken {partitioned} AS {FAILING}")
    assert tables(spark, db) == set()
    assert folder_entries(spark, db) == before


def test_failing_ctas_with_path_removes_the_folder_it_made(spark, gw, db, tmp_path):
    target = tmp_path / "out"
    with pytest.raises(MaterializedTableError, match="bad row"):
        gw.execute(f"CREATE TABLE broken WITH ('format' = 'csv', 'path' = '{target}') AS {FAILING}")
    assert not target.exists() and tables(spark, db) == set()
    target.mkdir()    # an empty folder of the user's stays, emptied
    with pytest.raises(MaterializedTableError, match="bad row"):
        gw.execute(f"CREATE TABLE broken WITH ('path' = '{target}') AS {FAILING}")
    assert target.is_dir() and list(target.iterdir()) == []


@pytest.mark.parametrize("origin", ["mtsql", "spark"])        # a table of Spark's own is managed
@pytest.mark.parametrize("partitioned", ["", "PARTITIONED BY (g)"])
def test_rtas_replaces_and_a_failing_one_keeps_the_old_table(spark, gw, db, partitioned, origin):
    create = f"CREATE TABLE t {partitioned} AS SELECT id, CAST(id % 2 AS STRING) AS g FROM range(4)"
    if origin == "spark":
        spark.sql(create.replace("TABLE t", "TABLE t USING parquet", 1))
    else:
        gw.execute(create)
    [result] = gw.execute(f"CREATE OR REPLACE TABLE t {partitioned} AS "
                          "SELECT id * 10 AS id, CAST(id % 3 AS STRING) AS g FROM range(6)")
    assert result.message == f"Replaced table spark_catalog.{db}.t (parquet, 6 rows)."
    replaced = {(i * 10, str(i % 3)) for i in range(6)}
    assert table_rows(spark, "t") == replaced
    before = folder_entries(spark, db)
    with pytest.raises(MaterializedTableError, match="bad row"):
        gw.execute(f"CREATE OR REPLACE TABLE t {partitioned} AS {FAILING}")
    assert table_rows(spark, "t") == replaced
    assert tables(spark, db) == {"t"} and folder_entries(spark, db) == before
    # a second replacement of a partitioned table must not purge the new data with the old name
    gw.execute(f"CREATE OR REPLACE TABLE t {partitioned} AS SELECT id, CAST(id AS STRING) AS g FROM range(3)")
    assert table_rows(spark, "t") == {(i, str(i)) for i in range(3)}


def test_if_not_exists_does_nothing_and_says_so(spark, gw, db):
    gw.execute("CREATE TABLE t AS SELECT 1 AS a")
    [result] = gw.execute("CREATE TABLE IF NOT EXISTS t AS SELECT 2 AS a")
    assert "already exists; nothing was written" in result.message
    assert table_rows(spark, "t") == {(1,)}
    with pytest.raises(MaterializedTableError, match=f"Table spark_catalog.{db}.t already exists"):
        gw.execute("CREATE TABLE t AS SELECT 2 AS a")


def test_reader_never_sees_a_partial_table(spark, gw, db):
    with reading(spark, "big") as seen:
        gw.execute("CREATE TABLE big PARTITIONED BY (g) AS "
                   "SELECT id, CAST(id % 20 AS STRING) AS g FROM range(300000)")
    seen = [-1 if isinstance(n, AnalysisException) else n for n in seen]       # not there yet: fine
    assert set(seen) <= {-1, 300000} and 300000 in seen and -1 in seen


@contextmanager
def reading(spark, table: str) -> Iterator[list]:
    """A reader counting the table's rows in a loop while the block runs, and twice after it; each
    count, or the error a read raised, in order."""
    seen: list = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                seen.append(spark.table(table).count())
            except Exception as error:      # noqa: BLE001 - the test decides which errors are fine
                seen.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        yield seen
        seen_after = len(seen)
        while len(seen) < seen_after + 2:
            time.sleep(0.01)
    finally:
        done.set()
        reader.join()


@pytest.mark.parametrize("statement, message", [
    ("CREATE TABLE x WITH ('format' = 'avro') AS SELECT 1 AS a", "Option 'format' = 'avro'"),
    ("CREATE TABLE x WITH ('connector' = 'kafka') AS SELECT 1 AS a", "Option 'connector' = 'kafka'"),
    ("CREATE TABLE x AS SELECT nope FROM range(1)", "UNRESOLVED_COLUMN"),
    ("CREATE TABLE x PARTITIONED BY (z) AS SELECT 1 AS a", "z"),
    ("CREATE OR REPLACE TABLE IF NOT EXISTS x AS SELECT 1 AS a", "cannot be combined with IF NOT EXISTS"),
])
def test_bad_ctas_is_a_clear_error_with_nothing_left(spark, gw, db, statement, message):
    before = folder_entries(spark, db)
    with pytest.raises(MaterializedTableError, match=message):
        gw.execute(statement)
    assert tables(spark, db) == set() and folder_entries(spark, db) == before


def test_ctas_over_a_materialized_table_name_is_refused(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE mt REFRESH_MODE = FULL AS SELECT * FROM sales")
    for statement in ("CREATE TABLE mt AS SELECT 1 AS a", "CREATE OR REPLACE TABLE mt AS SELECT 1 AS a"):
        with pytest.raises(MaterializedTableError, match="is a materialized table"):
            gw.execute(statement)
    assert len(table_rows(spark, "mt")) == 4


def test_path_that_is_not_empty_is_refused(spark, gw, db, tmp_path):
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(MaterializedTableError, match="names a folder that is not empty"):
        gw.execute(f"CREATE TABLE x WITH ('path' = '{folder}') AS SELECT 1 AS a")
    assert os.listdir(folder) == ["keep.txt"]


# ---------------------------------------------------------------- Python API
def test_save_as_creates_with_options_reaching_the_source(spark, db, tmp_path):
    frame = spark.sql("SELECT id, CAST(id % 2 AS STRING) AS g FROM range(5)")
    path = tmp_path / "json_table"
    pipeline = save_as(frame, f"{db}.api").option("format", "json").option("path", str(path)).create()
    assert not path.exists() and "api" not in tables(spark, db)     # create() writes nothing
    result = pipeline.execute()
    assert result.message == f"Created table spark_catalog.{db}.api (json, 5 rows)."
    assert table_rows(spark, "api") == {(i, str(i % 2)) for i in range(5)}
    assert any(f.endswith(".json") for f in os.listdir(path))
    assert detail(spark, "api", "Type") == "EXTERNAL"


def test_save_as_on_an_existing_table(spark, db):
    spark.sql("CREATE TABLE there USING parquet AS SELECT 1 AS a")
    frame = spark.sql("SELECT 2 AS a")
    with pytest.raises(MaterializedTableError, match="already exists"):
        save_as(frame, "there").create()
    result = save_as(frame, "there").create_if_not_exist().execute()
    assert "nothing was written" in result.message and table_rows(spark, "there") == {(1,)}


def test_save_as_validates_options_before_writing(spark, db):
    with pytest.raises(MaterializedTableError, match="Option 'format' = 'nosuch'"):
        save_as(spark.sql("SELECT 1 AS a"), "x").option("format", "nosuch").create()
    with pytest.raises(MaterializedTableError, match="not columns of the DataFrame"):
        save_as(spark.sql("SELECT 1 AS a"), "x").partitioned_by("b")
    assert tables(spark, db) == set()


def test_save_as_failing_job_leaves_nothing(spark, db):
    before = folder_entries(spark, db)
    pipeline = save_as(spark.sql(FAILING), "x").partitioned_by("g").create()
    with pytest.raises(MaterializedTableError, match="bad row"):
        pipeline.execute()
    assert tables(spark, db) == set() and folder_entries(spark, db) == before


def test_cancelled_ctas_leaves_nothing(spark, gw, db):
    spark.udf.register("slow", lambda x: __import__("time").sleep(0.05) or x, "bigint")
    group = f"mt_magic:ctas:spark_catalog.{db}.slow_t"
    errors: list[BaseException] = []

    def create() -> None:
        try:
            gw.execute("CREATE TABLE slow_t AS SELECT slow(id) AS id FROM range(400)")
        except BaseException as error:   # noqa: BLE001 - recorded for the assertion
            errors.append(error)

    before = folder_entries(spark, db)
    worker = threading.Thread(target=create)
    worker.start()
    deadline = time.monotonic() + 60
    while worker.is_alive() and time.monotonic() < deadline:   # cancelled as soon as its job runs
        cancel_jobs(spark, group)
        worker.join(0.2)
    assert len(errors) == 1 and isinstance(errors[0], MaterializedTableError)
    assert "cancel" in str(errors[0]).lower() and not BRIDGE_TEXT.search(str(errors[0])), str(errors[0])
    assert tables(spark, db) == set() and folder_entries(spark, db) == before


def test_a_cancel_landing_as_ctas_publishes_is_not_applied_halfway(spark, gw, db, monkeypatch):
    """Over Spark Connect a cancel reaches catalog commands too: one landing as the server completed
    the RENAME made the client raise for a rename that happened, and the undo then deleted the files of
    the table it had published (once in CI). A cancel stops the write; the renames, the location
    switch and their undoing run in no job group, and a cancel landing on them changes nothing."""
    group, real_sql, steps = f"mt_magic:ctas:spark_catalog.{db}.t", spark.sql, []

    def sql(text: str, *args, **kwargs):
        if " RENAME TO " in text or " SET LOCATION " in text or text.startswith("DROP TABLE"):
            with cancelled_throughout(spark, group) as active:
                steps.append((text.split()[3 if "RENAME" in text or "LOCATION" in text else 2], active))
                return real_sql(text, *args, **kwargs)
        return real_sql(text, *args, **kwargs)

    monkeypatch.setattr(spark, "sql", sql)
    gw.execute("CREATE TABLE t AS SELECT 1 AS a")
    gw.execute("CREATE OR REPLACE TABLE t AS SELECT 2 AS a, 'x' AS b")     # the old renamed aside
    gw.execute("CREATE OR REPLACE TABLE t AS SELECT 3 AS a, 'y' AS b")     # a location switch
    monkeypatch.undo()
    assert len(steps) >= 4 and all(active == set() for _, active in steps), steps
    assert table_rows(spark, "t") == {(3, "y")} and tables(spark, db) == {"t"}
    assert versions_of(spark, "t")[1]


def versions_of(spark, name: str) -> tuple[str, list[str]]:
    """The folder a table keeps its versions in, and their names, oldest first."""
    folder = table_properties(spark, name)[VERSIONS_PROPERTY].removeprefix("file:")
    return folder, sorted(n for n in os.listdir(folder) if n.startswith("v-")) if os.path.isdir(folder) else []


@pytest.mark.parametrize("staged, expected", [(True, 2), (False, 1)])
def test_a_replace_killed_between_its_renames_is_finished_by_the_next_owner(spark, db, store_path, staged,
                                                                            expected):
    """What a kill between REPLACE's renames leaves in a persistent catalog (Hive; here, this
    session's): the complete new table takes the name (the old version retired), or without it the old
    one gets it back."""
    gateway = Gateway(spark, catalog_store=store_path)
    gateway.execute("CREATE TABLE t AS SELECT 1 AS gen")
    gateway.close()
    folder, (old,) = versions_of(spark, "t")
    new = f"file:{folder}/v-99990101T000000000000-00000000"
    spark.sql("ALTER TABLE t RENAME TO _mt_replaced_t_0")
    if staged:
        spark.sql(f"CREATE TABLE _mt_staging_t_0 USING parquet LOCATION '{new}' "
                  f"TBLPROPERTIES ('{VERSIONS_PROPERTY}' = 'file:{folder}') AS SELECT 2 AS gen")
    location = spark.sql(f"DESCRIBE DATABASE EXTENDED {db}").where("info_name = 'Location'").first()[1]
    pending = PendingWrites(store_path)
    note_id = pending.add({"catalog": "spark_catalog", "database": db, "name": "t", "staging": "_mt_staging_t_0",
                             "backup": "_mt_replaced_t_0", "path": new, "path_existed": False,
                             "replaced": f"file:{folder}/{old}",
                             "folders": [f"{location}/_mt_staging_t_0", f"{location}/_mt_replaced_t_0"]})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    note = os.path.join(pending.folder, note_id + ".json")
    with open(note) as handle:
        written = json.load(handle)
    with open(note, "w") as handle:
        json.dump({**written, "pid": int(dead.stdout)}, handle)      # its writer is gone

    restarted = Gateway(spark, catalog_store=store_path)
    try:
        assert table_rows(spark, "t") == {(expected,)}
        assert tables(spark, db) == {"t"} and folder_entries(spark, db) == {"t"}
        assert versions_of(spark, "t")[1] == ([old, os.path.basename(new)] if staged else [old])
        retired = [n for n in os.listdir(pending.folder) if not n.startswith(".")]
        assert len(retired) == (1 if staged else 0) and all(n.startswith("retired-") for n in retired)
    finally:
        restarted.close()


def test_a_reader_of_the_replaced_table_finishes_and_old_versions_go_by_age(spark, db, store_path):
    gateway = Gateway(spark, catalog_store=store_path,
                      config={"materialized-table.storage.version-retention": "0 s"})
    try:
        gateway.execute("CREATE TABLE t AS SELECT id FROM range(1000)")
        reader = spark.table("t")           # planned now: a classic session has listed the old files
        gateway.execute("CREATE OR REPLACE TABLE t AS SELECT id FROM range(10)")
        assert reader.count() in (1000, 10)  # the old files are still there (Connect re-plans: new ones)
        assert spark.table("t").count() == 10
        folder, kept = versions_of(spark, "t")
        assert len(kept) == 2                # the old version outlives its readers until the owner sweeps
        gateway.close()
        gateway = Gateway(spark, catalog_store=store_path,
                          config={"materialized-table.storage.version-retention": "0 s"})
        assert versions_of(spark, "t")[1] == kept[1:]
        gateway.execute("DROP TABLE t")
        assert os.listdir(folder) == kept[1:]       # a reader of the dropped table finishes too
        gateway.close()
        gateway = Gateway(spark, catalog_store=store_path,
                          config={"materialized-table.storage.version-retention": "0 s"})
        assert os.listdir(folder) == []
    finally:
        gateway.close()


def test_readers_never_fail_while_a_table_is_replaced(spark, gw, db):
    """REPLACE of a table read the same way as before keeps the name: a reader in a loop always finds
    the old or the new table, never a missing name (Restart & Run All of a cell that makes a source)."""
    statement = "CREATE OR REPLACE TABLE src AS SELECT id, CAST(id % 7 AS STRING) AS g FROM range({n})"
    gw.execute(statement.format(n=1000))
    with reading(spark, "src") as seen:
        for n in (2000, 3000, 4000):
            gw.execute(statement.format(n=n))
        gw.execute("CREATE OR REPLACE TABLE src COMMENT 'kept' AS SELECT id, CAST(id AS STRING) AS g FROM range(5)")
    failures = [str(n)[:200] for n in seen if isinstance(n, Exception)]
    assert not failures, failures[:3]
    assert set(seen) <= {1000, 2000, 3000, 4000, 5} and 5 in seen
    assert gw.spark.sql("DESCRIBE TABLE EXTENDED src").where("col_name = 'Comment'").first()[1] == "kept"
