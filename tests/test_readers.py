"""Readers polling a table during refreshes see the old data or the new, never empty or mixed."""

from __future__ import annotations

import os
import threading

import pytest
from pyspark.sql import functions as F

from mt_magic.manager import refresh_runs
from mt_magic.refresh.changes import Snapshots
from mt_magic.spark.files import local_path
from mt_magic.spark.tables import set_table_location
from mt_magic.storage import versions
from mt_magic.spark.kind import is_connect
from helpers import cancelled_throughout, table_rows


@pytest.mark.parametrize("partitioned", [False, True])
def test_readers_never_see_a_partial_table(spark, gw, db, partitioned):
    spark.sql("CREATE TABLE src (k STRING, gen INT) USING parquet")
    spark.sql("INSERT INTO src SELECT CAST(id % 8 AS STRING), 0 FROM range(400)")
    clause = "PARTITIONED BY (k)" if partitioned else ""
    gw.execute(f"CREATE MATERIALIZED TABLE mt {clause} REFRESH_MODE = FULL AS SELECT k, gen FROM src")
    seen, errors, stop = [], [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                row = spark.table(f"{db}.mt").agg(F.count("*"), F.countDistinct("gen"), F.min("gen")).first()
                seen.append(tuple(row))
            except Exception as error:     # any failed read is a failure of atomic publishing
                errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        generation = 0
        while generation < 4 or len(seen) < 6:      # a cold JVM reads slowly: refresh until seen enough
            generation += 1
            spark.sql(f"INSERT OVERWRITE src SELECT CAST(id % 8 AS STRING), {generation} FROM range(400)")
            gw.execute("ALTER MATERIALIZED TABLE mt REFRESH")
            assert generation < 40
    finally:
        stop.set()
        reader.join(60)
    assert errors == []
    assert all(count == 400 and distinct == 1 for count, distinct, _ in seen), set(seen)
    assert {gen for _, _, gen in seen} > {0}


def test_a_publish_never_lists_again_what_a_reader_of_the_session_has_listed(spark, db, tmp_path):
    """Spark's ALTER TABLE … SET LOCATION and REFRESH TABLE list the session's cached listing of the
    old version again, in place; a reader planning with that listing at that moment got Spark's
    INTERNAL_ERROR (seen once in a CI run of the loop above). A publish drops the listing instead:
    nothing is listed between the reads, and the next read sees the new version. A Connect server
    mt_magic starts caches no listing at all, so each read lists its own."""
    old, new = (str(tmp_path / name) for name in ("v1", "v2"))
    spark.range(100).repartition(3).write.parquet(old)
    spark.range(7).write.parquet(new)
    spark.sql(f"CREATE TABLE t (id BIGINT) USING parquet LOCATION '{old}'")
    assert spark.table("t").count() == 100                  # the session has listed version one
    if is_connect(spark):
        assert spark.conf.get("spark.sql.filesourceTableRelationCacheSize") == "0"
    else:
        discovered = spark._jvm.org.apache.spark.metrics.source.HiveCatalogMetrics.METRIC_FILES_DISCOVERED()
        before = discovered.getCount()
    set_table_location(spark, f"spark_catalog.{db}.t", new, "Publishing t")
    if not is_connect(spark):
        assert discovered.getCount() == before
    assert spark.table("t").count() == 7


@pytest.mark.parametrize("technique", ["full", "incremental"])
def test_a_cancel_landing_as_a_refresh_publishes_leaves_the_table_readable(spark, gw, db, monkeypatch, technique):
    """A refresh undoes its version when its publish raises. Over Spark Connect a cancel (DROP, a
    closing service) landing as the server completed SET LOCATION made the client raise for a switch
    that happened, and the undo deleted the version the table then read. The publish runs in no job
    group: a cancel landing on it is not applied (a FULL refresh, and an incremental one)."""
    spark.sql("CREATE TABLE src (k STRING, n INT) USING parquet")
    spark.sql("INSERT INTO src VALUES ('a', 1)")
    gw.execute(f"CREATE MATERIALIZED TABLE mt WITH ('refresh.policy' = '{technique}') FRESHNESS = INTERVAL "
               "'1' DAY REFRESH_MODE = FULL AS SELECT k, SUM(n) AS n FROM src GROUP BY k")
    steps = []

    def switch(spark_, quoted, location, what):
        with cancelled_throughout(spark, f"mt_magic:spark_catalog.{db}.mt") as active:
            steps.append(active)
            set_table_location(spark_, quoted, location, what)

    monkeypatch.setattr(versions, "set_table_location", switch)
    spark.sql("INSERT INTO src VALUES ('a', 2), ('b', 5)")
    [result] = gw.execute("ALTER MATERIALIZED TABLE mt REFRESH")
    monkeypatch.undo()
    assert steps == [set()] and gw.history("mt", limit=1)[0]["technique"] == technique, (steps, result.message)
    assert {tuple(r) for r in spark.table("mt").collect()} == {("a", 3), ("b", 5)}


@pytest.mark.parametrize("strategy", ["stream", "recompute"])
def test_a_continuous_table_never_shows_a_state_its_source_never_had(spark, gw, db, strategy):
    """A day of the source overwritten again and again (Spark's overwrite deletes the old files before
    its job commits the new ones) while a reader polls the table: every state it sees is one the
    source had, whichever way the table is kept (a stream, or a recompute on each change)."""
    spark.sql("CREATE TABLE clicks (id BIGINT, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("INSERT INTO clicks SELECT id, CONCAT('d', id % 3) FROM range(3000)")
    query = "SELECT ds, COUNT(*) AS n FROM clicks GROUP BY ds"
    if strategy == "recompute":     # a query Spark cannot stream: recomputed when the source changes
        query = "SELECT ds, COUNT(*) AS n FROM (SELECT DISTINCT id, ds FROM clicks) GROUP BY ds"
    gw.execute(f"CREATE MATERIALIZED TABLE per_day FRESHNESS = INTERVAL '1' SECOND AS {query}")
    assert gw.describe("per_day")["refresh_strategy"] == {"stream": "incremental streaming",
                                                           "recompute": "recompute on change"}[strategy]
    seen, stop = [], threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(tuple(spark.table(f"{db}.per_day").agg(F.sum("n"), F.count("*")).first()))
            stop.wait(0.1)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(8):
            spark.sql("INSERT OVERWRITE clicks PARTITION (ds = 'd1') SELECT id FROM range(3000) WHERE id % 3 = 1")
    finally:
        stop.set()
        reader.join(60)
    assert seen and set(seen) == {(3000, 3)}, sorted(set(seen))



def _clicks_without_a_day(spark, gw, policy: str) -> tuple[str, str, str]:
    """A table over `clicks`; a row appended, then the day d1 deleted by an overwrite whose job has not
    committed yet: the day's folder and where it lies meanwhile, and the source's folder."""
    spark.sql("CREATE TABLE clicks (id BIGINT, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("INSERT INTO clicks SELECT id, CONCAT('d', id % 3) FROM range(3000)")
    gw.execute(f"CREATE MATERIALIZED TABLE per_day WITH ('refresh.policy' = '{policy}') REFRESH_MODE = FULL "
               "AS SELECT ds, COUNT(*) AS n FROM (SELECT DISTINCT id, ds FROM clicks) GROUP BY ds")
    spark.sql("INSERT INTO clicks VALUES (3000, 'd0')")
    root = local_path(spark.sql("DESCRIBE TABLE EXTENDED clicks").where("col_name = 'Location'").first()[1])
    os.rename(root + "/ds=d1", root + "/_deleted")
    return root + "/ds=d1", root + "/_deleted", root


def test_a_snapshot_taken_as_a_write_commits_is_taken_again(spark, gw, db, monkeypatch):
    """A job overwriting a day commits just after the refresh listed the source without it, and
    before the refresh looks for jobs writing into it: the source's folder changed meanwhile, so the
    refresh lists again rather than read the files of a state no finished write left."""
    day, deleted, root = _clicks_without_a_day(spark, gw, "incremental")
    os.mkdir(root + "/_temporary")      # the job writes
    takes, take = [], Snapshots.take

    def listed_then_committed(snapshots, table):
        taken = take(snapshots, table)
        if not takes:
            os.rename(deleted, day)
            os.rmdir(root + "/_temporary")
        takes.append(table.identifier)
        return taken

    monkeypatch.setattr(Snapshots, "take", listed_then_committed)
    gw.execute("ALTER MATERIALIZED TABLE per_day REFRESH")
    assert gw.history("per_day", limit=1)[0]["technique"] == "incremental", gw.history("per_day", limit=1)[0]["reason"]
    assert table_rows(spark, "per_day") == {("d0", 1001), ("d1", 1000), ("d2", 1000)} and len(takes) >= 2


def test_a_read_between_two_overwrites_of_a_day_is_not_published(spark, gw, db, monkeypatch):
    """An overwrite deletes a day's folder, then its job commits the day again; the next overwrite
    deletes it again. A refresh that read the source without the day and checked it between the next
    two found the same files twice: the source's folder tells that it was written between, so the
    refresh reads again rather than publish a state no finished write left."""
    day, deleted, _ = _clicks_without_a_day(spark, gw, "full")
    checks, held_still = [], refresh_runs.Runs._held_still

    def between_two_overwrites(runs, table, snapshot) -> None:
        checks.append(table.identifier)
        if len(checks) > 1:
            return held_still(runs, table, snapshot)
        os.rename(deleted, day)       # the job commits the day
        os.rename(day, deleted)       # and the next overwrite deletes it again
        try:
            held_still(runs, table, snapshot)
        finally:
            os.rename(deleted, day)   # its job commits

    monkeypatch.setattr(refresh_runs.Runs, "_held_still", between_two_overwrites)
    gw.execute("ALTER MATERIALIZED TABLE per_day REFRESH")
    assert gw.history("per_day", limit=1)[0]["technique"] == "full"
    assert table_rows(spark, "per_day") == {("d0", 1001), ("d1", 1000), ("d2", 1000)} and len(checks) >= 2
