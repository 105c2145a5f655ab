"""Gateway.history: every refresh with its trigger, outcome and runner, newest first, kept beside the store."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from mt_magic import Gateway, MaterializedTableError
from mt_magic.notebook.dashboard import Dashboard, run_for_dashboard
from mt_magic.spark.kind import is_connect


def test_refreshes_are_recorded_newest_first_and_survive_a_new_gateway(spark, gw, sales, store_path, db):
    gw.execute("CREATE MATERIALIZED TABLE daily PARTITIONED BY (ds) "
               "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd') FRESHNESS = INTERVAL '1' DAY "
               "AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    gw.execute("ALTER MATERIALIZED TABLE daily REFRESH PARTITION (ds = '2024-01-02')")
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 1.0)")     # else the fire finds nothing new
    gw.refresh("daily", schedule_time="2024-01-03 00:00:00")
    spark.sql("DROP TABLE sales")
    with pytest.raises(MaterializedTableError, match="TABLE_OR_VIEW_NOT_FOUND"):
        gw.execute("ALTER MATERIALIZED TABLE daily REFRESH")
    entries = gw.history("daily")
    assert [e["trigger"] for e in entries] == ["manual", "scheduled", "manual", "initial"]
    assert [e["outcome"] for e in entries] == ["FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    failed, scheduled, partition, initial = entries
    assert "TABLE_OR_VIEW_NOT_FOUND" in failed["error"] and failed["rows"] is None
    assert scheduled["schedule_time"] == "2024-01-03 00:00:00" and scheduled["partitions"] == {"ds": "2024-01-02"}
    assert partition["partitions"] == {"ds": "2024-01-02"} and partition["rows"] == 1
    assert initial["rows"] == 2 and initial["partitions"] == {} and initial["error"] is None
    for entry in entries:
        assert entry["table"] == f"spark_catalog.{db}.daily"
        assert entry["started"] <= entry["finished"]
        assert entry["runner"]["pid"] == os.getpid()
        assert entry["runner"]["application_id"] == spark.conf.get("spark.app.id")
    assert gw.history("daily", limit=2) == entries[:2]
    gw.close()
    again = Gateway(spark, catalog_store=store_path)
    try:
        assert again.history() == entries
        assert again.history("other") == []
    finally:
        again.close()


def test_a_refresh_that_fails_before_it_decides_is_recorded(spark, gw, store_path):
    """A new process (a service restarted) has never read the source's schema: with the source dropped
    meanwhile, its first refresh fails while choosing how to refresh (in a classic session; over
    Connect while it runs), and the history says so."""
    spark.sql("CREATE TABLE visits (k INT, v DOUBLE) USING parquet")
    spark.sql("INSERT INTO visits VALUES (1, 1.0), (2, 2.0)")
    gw.execute("CREATE MATERIALIZED TABLE total FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL "
               "AS SELECT SUM(v) AS s FROM visits")
    gw.close()
    spark.sql("DROP TABLE visits")
    again = Gateway(spark, catalog_store=store_path)
    try:
        with pytest.raises(MaterializedTableError, match="TABLE_OR_VIEW_NOT_FOUND"):
            again.execute("ALTER MATERIALIZED TABLE total REFRESH")
        failed, initial = again.history("total")
        assert (failed["outcome"], failed["trigger"]) == ("FAILED", "manual")
        assert "TABLE_OR_VIEW_NOT_FOUND" in failed["error"] and initial["outcome"] == "SUCCEEDED"
    finally:
        again.close()


def test_a_table_created_again_under_a_dropped_ones_name_has_a_history_of_its_own(spark, gw, sales):
    """The dropped table's runs (a failure among them) stay with it: the new table's history, in
    Gateway.history, mt_refresh_history and the dashboard, starts with its own initial refresh; the
    earlier runs come on request, each entry naming the table it ran for (when it was created)."""
    create = "CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS SELECT * FROM sales"
    gw.execute(create)
    spark.sql("ALTER TABLE sales RENAME TO gone")
    with pytest.raises(MaterializedTableError):
        gw.execute("ALTER MATERIALIZED TABLE t REFRESH")
    spark.sql("ALTER TABLE gone RENAME TO sales")
    first = gw.describe("t")["created_at"]
    gw.execute("DROP MATERIALIZED TABLE t")
    assert [e["outcome"] for e in gw.history("t")] == ["FAILED", "SUCCEEDED"]    # dropped: still its own
    gw.execute(create)
    second = gw.describe("t")["created_at"]
    assert second != first
    assert [(e["trigger"], e["outcome"], e["created"]) for e in gw.history("t")] == [("initial", "SUCCEEDED", second)]
    assert [(e["outcome"], e["created"]) for e in gw.history("t", earlier=True)] == [
        ("SUCCEEDED", second), ("FAILED", first), ("SUCCEEDED", first)]
    assert [e["created"] for e in gw.history(earlier=False)] == [second]
    rows = spark.sql("SELECT created, outcome FROM mt_refresh_history('t')").collect()
    assert [tuple(r) for r in rows] == [(second, "SUCCEEDED")]
    rows = spark.sql("SELECT created, outcome FROM mt_refresh_history('t', TRUE)").collect()
    assert [tuple(r) for r in rows] == [(second, "SUCCEEDED"), (first, "FAILED"), (first, "SUCCEEDED")]
    detail = Dashboard(gw, run_for_dashboard(gw.execute), gw.describe("t")["identifier"]).detail.value
    assert detail.count("SUCCEEDED") == 1 and "FAILED" not in detail


def test_a_refresh_says_its_spark_jobs_and_the_time_of_each_phase(spark, gw, sales):
    """What a refresh did, beside what it decided: the Spark jobs of its job group (a classic session
    counts them; a Spark Connect client is not told them) and the seconds it spent deciding, running
    and recording — in the history, mt_refresh_history, DESCRIBE EXTENDED's last refresh and the
    dashboard's chart."""

    gw.execute("CREATE MATERIALIZED TABLE totals FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
               "AS SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 1.0)")
    gw.execute("ALTER MATERIALIZED TABLE totals REFRESH")
    entry = gw.history("totals", limit=1)[0]
    assert entry["technique"] == "incremental", entry
    phases = entry["phases"]
    assert set(phases) == {"decide", "run", "record"} and all(s >= 0 for s in phases.values()), entry
    took = (datetime.fromisoformat(entry["finished"]) - datetime.fromisoformat(entry["started"])).total_seconds()
    assert phases["run"] > 0 and sum(phases.values()) <= took + 0.01, entry
    if is_connect(spark):
        assert entry["jobs"] is None
    else:
        assert entry["jobs"] >= 1, entry      # at least the write of its new version
    (row,) = spark.sql("SELECT jobs, phases FROM mt_refresh_history('totals') LIMIT 1").collect()
    assert (row.jobs, json.loads(row.phases)) == (entry["jobs"], phases)
    described = {r[0]: r[1] for r in gw.execute("DESCRIBE EXTENDED totals")[-1].rows}
    last = json.loads(described["Last Refresh"])
    assert (last["jobs"], last["phases"]) == (entry["jobs"], {k: phases[k] for k in ("decide", "run")}), last
    chart = Dashboard(gw, run_for_dashboard(gw.execute), entry["table"]).detail.value
    assert f"run {phases['run']:.2f} s, record {phases['record']:.2f} s" in chart


def test_a_refresh_says_the_rows_it_inserted_and_deleted(spark, gw, db):
    """One refresh shows its cost followed the change: a day of the source rewritten takes that day's
    rows out of a filter's table and puts its rows now in, not the table's (a partition refreshed: its
    rows); an append deletes nothing; a skip changes nothing; a refresh that writes the whole table
    again deleted all it held. In the history, mt_refresh_history, DESCRIBE EXTENDED's last refresh
    and the dashboard's chart."""
    spark.sql("CREATE TABLE events (k INT, v INT, day STRING) USING parquet PARTITIONED BY (day)")
    spark.sql("INSERT INTO events VALUES (1, 5, 'd1'), (2, -1, 'd1'), (3, 7, 'd2'), (4, 8, 'd2'), (5, 9, 'd3')")
    for name, query in (("kept", "SELECT k, v, day FROM events WHERE v > 0"),
                        ("by_day", "SELECT day, SUM(v) AS v FROM events GROUP BY day")):
        gw.execute(f"CREATE MATERIALIZED TABLE {name} {'PARTITIONED BY (day) ' if name == 'by_day' else ''}"
                   f"WITH ('refresh.policy' = 'incremental') FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
                   f"AS {query}")

    def refreshed(name: str, schedule_time: str | None = None) -> tuple:
        gw.refresh(name, schedule_time=schedule_time)
        entry = gw.history(name, limit=1)[0]
        assert entry["table_rows"] in (None, spark.table(name).count()), entry
        return entry["technique"], entry["inserted"], entry["deleted"], entry["table_rows"]

    assert [(e["inserted"], e["deleted"], e["table_rows"]) for e in (gw.history("kept")[0], gw.history("by_day")[0])] \
        == [(4, 0, 4), (3, 0, 3)]
    spark.sql("INSERT OVERWRITE events PARTITION (day = 'd2') VALUES (3, 7), (6, -2), (7, 1), (8, 2)")
    assert refreshed("kept") == ("incremental", 3, 2, 5)
    gw.execute("ALTER MATERIALIZED TABLE by_day REFRESH PARTITION (day = 'd2')")
    entry = gw.history("by_day", limit=1)[0]
    assert (entry["technique"], entry["inserted"], entry["deleted"], entry["table_rows"]) == ("partitions", 1, 1, 3)
    spark.sql("INSERT INTO events VALUES (9, 3, 'd3')")
    assert refreshed("kept") == ("incremental", 1, 0, 6)
    assert refreshed("kept", schedule_time="2024-01-03 00:00:00") == ("skip", 0, 0, 6)
    assert refreshed("kept") == ("full", 6, 6, 6)       # a manual refresh recomputes
    rows = spark.sql("SELECT technique, inserted, deleted, table_rows FROM mt_refresh_history('kept')").collect()
    assert [tuple(r) for r in rows] == [("full", 6, 6, 6), ("skip", 0, 0, 6), ("incremental", 1, 0, 6),
                                        ("incremental", 3, 2, 5), (rows[-1].technique, 4, 0, 4)]
    described = {r[0]: r[1] for r in gw.execute("DESCRIBE EXTENDED kept")[-1].rows}
    last = json.loads(described["Last Refresh"])
    assert (last["inserted"], last["deleted"]) == (6, 6), last
    chart = Dashboard(gw, run_for_dashboard(gw.execute), gw.history("kept")[0]["table"]).detail.value
    assert "+3 −2 rows" in chart and "+1 −0 rows" in chart and "+6 −6 rows" in chart


def test_the_rows_deleted_are_counted_in_every_format(spark, gw, db):
    """Parquet and ORC files say their rows in their footers (read without a Spark job); a JSON table's
    rows taken out are counted with one."""
    spark.sql("CREATE TABLE events (k INT, v INT, day STRING) USING parquet PARTITIONED BY (day)")
    spark.sql("INSERT INTO events VALUES (1, 5, 'd1'), (2, -1, 'd1'), (3, 7, 'd2'), (4, 8, 'd2'), (5, 9, 'd3')")
    for fmt in ("orc", "json"):
        gw.execute(f"CREATE MATERIALIZED TABLE kept_{fmt} WITH ('format' = '{fmt}', 'refresh.policy' = 'incremental') "
                   "FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS SELECT k, v, day FROM events WHERE v > 0")
    spark.sql("INSERT OVERWRITE events PARTITION (day = 'd2') VALUES (3, 7), (6, -2), (7, 1), (8, 2)")
    for fmt in ("orc", "json"):
        gw.refresh(f"kept_{fmt}")
        entry = gw.history(f"kept_{fmt}", limit=1)[0]
        assert (entry["technique"], entry["inserted"], entry["deleted"], entry["table_rows"]) == \
            ("incremental", 3, 2, 5), entry
        assert spark.table(f"kept_{fmt}").count() == 5
