"""CONTINUOUS for every query (streaming where Spark can, recompute on change elsewhere), pipelines of
materialized tables, and refreshes that cost what changed."""

from __future__ import annotations

import glob
import json
import os
import time
from collections import Counter
from datetime import datetime

import pytest
from helpers import wait_for

from mt_magic import MaterializedTableError
from mt_magic.notebook.status import table_statuses
from mt_magic.refresh.changes import Change, compare
from mt_magic.spark.kind import is_connect
from mt_magic.sql.parser import parse

QUERIES = {
    "join_agg": "SELECT e.ds, e.user_id, u.name, SUM(e.amount) AS total FROM events e JOIN users u "
                "ON e.user_id = u.user_id GROUP BY e.ds, e.user_id, u.name",
    "left_join": "SELECT e.user_id, e.amount, u.name FROM events e LEFT JOIN users u ON e.user_id = u.user_id",
    "full_join": "SELECT e.user_id AS eu, u.user_id AS uu, e.amount, u.name FROM events e "
                 "FULL OUTER JOIN users u ON e.user_id = u.user_id",
    "distinct_count": "SELECT ds, COUNT(DISTINCT user_id) AS users FROM events GROUP BY ds",
    "top1": "SELECT user_id, ds, amount FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id "
            "ORDER BY amount DESC, ds) AS r FROM events) WHERE r = 1",
    "order_limit": "SELECT user_id, ds, amount FROM events ORDER BY amount DESC, user_id, ds LIMIT 3",
    "in_subquery": "SELECT ds, user_id, amount FROM events WHERE user_id IN "
                   "(SELECT user_id FROM users WHERE name LIKE 'a%')",
    "union_aggs": "SELECT 'events' AS what, COUNT(*) AS n FROM events UNION ALL "
                  "SELECT 'users', COUNT(*) FROM users",
    "agg_of_agg": "SELECT MAX(total) AS top FROM (SELECT user_id, SUM(amount) AS total FROM events "
                  "GROUP BY user_id)",
    "self_join": "SELECT a.user_id, COUNT(*) AS pairs FROM events a JOIN events b "
                 "ON a.user_id = b.user_id AND a.ds < b.ds GROUP BY a.user_id",
    "streamed_sum": "SELECT user_id, SUM(amount) AS total FROM events GROUP BY user_id",
}


def bag(spark, sql: str) -> Counter:
    return Counter(tuple(r) for r in spark.sql(sql).collect())


def matches(spark, table: str, query: str) -> bool:
    return bag(spark, f"SELECT * FROM {table}") == bag(spark, query)


def converged(spark, gw, names) -> None:
    """Every table matches its query. A round of checks alone takes 10-20 s on a busy machine (two
    queries a table), hence the long wait; a table that never converges says what its refreshes did."""
    pending = list(names)

    def check() -> bool:
        pending[:] = [n for n in pending if not matches(spark, n, QUERIES[n])]
        return not pending
    try:
        wait_for(check, timeout=150, interval=0.5)
    except AssertionError:
        said = {n: ({k: gw.describe(n)[k] for k in ("refresh_status", "last_refresh", "consecutive_failures")},
                    [(e["trigger"], e["outcome"], e["technique"], e["reason"], e.get("error"))
                     for e in gw.history(n, limit=5)]) for n in pending}
        raise AssertionError(f"not converged: {said}") from None


@pytest.fixture
def sources(spark, db):
    spark.sql("CREATE TABLE events (ds STRING, user_id INT, amount DOUBLE) USING parquet")
    spark.sql("CREATE TABLE users (user_id INT, name STRING) USING parquet")
    spark.sql("INSERT INTO events VALUES ('2024-01-01', 1, 10.0), ('2024-01-01', 2, 5.0), "
              "('2024-01-02', 1, 7.0), ('2024-01-02', 3, 2.0)")
    spark.sql("INSERT INTO users VALUES (1, 'ann'), (2, 'bob'), (3, 'amy')")


def test_every_query_converges_in_continuous_mode(spark, gw, sources):
    for name, query in QUERIES.items():
        gw.execute(f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '5' SECOND "
                   f"REFRESH_MODE = CONTINUOUS AS {query}")
        assert matches(spark, name, query), name          # filled before CREATE returned
    strategies = {name: gw.describe(name)["refresh_strategy"] for name in QUERIES}
    assert strategies["streamed_sum"] == "incremental streaming"
    assert strategies["join_agg"] == strategies["distinct_count"] == "recompute on change"
    spark.sql("INSERT INTO events VALUES ('2024-01-03', 2, 9.0), ('2024-01-03', 4, 1.0)")
    spark.sql("INSERT INTO users VALUES (4, 'al')")
    converged(spark, gw, QUERIES)
    # Not appends: a file stream alone would count the old rows too.
    spark.sql("INSERT OVERWRITE events VALUES ('2024-02-01', 1, 3.0), ('2024-02-01', 2, 4.0)")
    spark.sql("INSERT OVERWRITE users VALUES (1, 'abe')")
    converged(spark, gw, QUERIES)
    assert bag(spark, "SELECT * FROM streamed_sum") == Counter({(1, 3.0): 1, (2, 4.0): 1})


def test_the_strategy_is_chosen_shown_and_reasoned(spark, gw, sources):
    [plan] = gw.execute(f"CREATE MATERIALIZED TABLE ranked FRESHNESS = INTERVAL '5' SECOND AS {QUERIES['top1']}",
                        dry_run=True)
    assert "recompute on change" in plan.message
    gw.execute(f"CREATE MATERIALIZED TABLE ranked FRESHNESS = INTERVAL '5' SECOND AS {QUERIES['top1']}")
    described = gw.describe("ranked")
    assert described["refresh_strategy"] == "recompute on change"
    assert "Window function is not supported" in described["strategy_reason"]
    assert described["refresh_handler"]["kind"] == "change-detector"
    [shown] = gw.execute("SHOW CREATE MATERIALIZED TABLE ranked")
    assert "-- Refresh strategy: recompute on change: " in shown.rows[0][0]
    assert parse(shown.rows[0][0])                        # the comments keep it a statement
    rows = {r[0]: r[1] for r in gw.execute("DESCRIBE EXTENDED ranked")[0].rows}
    assert rows["Refresh Strategy"].startswith("recompute on change")
    assert rows["Change Detection"] == "snapshots of the sources' files"
    gw.execute("ALTER MATERIALIZED TABLE ranked SUSPEND")
    assert not gw.pipelines.job_running(described["identifier"])
    spark.sql("INSERT INTO events VALUES ('2024-01-05', 1, 99.0)")
    gw.execute("ALTER MATERIALIZED TABLE ranked RESUME")
    wait_for(lambda: matches(spark, "ranked", QUERIES["top1"]), timeout=30)
    streamable = "SELECT user_id, ds, amount FROM events WHERE amount > 0"
    gw.execute(f"ALTER MATERIALIZED TABLE ranked AS {streamable}")       # now it can stream
    assert gw.describe("ranked")["refresh_strategy"] == "incremental streaming"
    spark.sql("INSERT INTO events VALUES ('2024-01-06', 2, 1.0)")
    wait_for(lambda: matches(spark, "ranked", streamable), timeout=30)


def test_a_chain_of_materialized_tables_converges_and_drop_names_readers(spark, gw, sources):
    gw.execute("CREATE MATERIALIZED TABLE c1 FRESHNESS = INTERVAL '2' SECOND AS "
               "SELECT user_id, SUM(amount) AS total FROM events GROUP BY user_id")
    gw.execute("CREATE MATERIALIZED TABLE c2 FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = CONTINUOUS AS "
               "SELECT COUNT(*) AS n, SUM(total) AS total FROM c1")
    gw.execute("CREATE MATERIALIZED TABLE f3 FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL AS "
               "SELECT n * 10 AS n10, total FROM c2")
    gw.execute("CREATE MATERIALIZED TABLE f0 FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL AS "
               "SELECT ds, COUNT(*) AS n FROM events GROUP BY ds")
    gw.execute("CREATE MATERIALIZED TABLE c4 FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = CONTINUOUS AS "
               "SELECT MAX(n) AS most FROM f0")
    assert "reads materialized table" in gw.describe("c2")["strategy_reason"]
    spark.sql("INSERT INTO events VALUES ('2024-01-02', 5, 100.0), ('2024-01-02', 6, 1.0)")
    expected = {"f3": "SELECT COUNT(DISTINCT user_id) * 10, SUM(amount) FROM events",
                "c4": "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM events GROUP BY ds)"}
    wait_for(lambda: all(bag(spark, f"SELECT * FROM {t}") == bag(spark, q) for t, q in expected.items()),
             timeout=60, interval=0.5)
    with pytest.raises(MaterializedTableError, match=r"c1 is read by materialized table \S+c2: drop it first"):
        gw.execute("DROP MATERIALIZED TABLE c1")
    assert spark.catalog.tableExists("c1")


def _scheduled(gw, name: str) -> None:
    gw.refresh(name, schedule_time=datetime.now().strftime("%Y-%m-%d %H:%M:%S"))


def test_a_full_refresh_is_skipped_when_no_source_changed(spark, gw, sources):
    gw.execute("CREATE MATERIALIZED TABLE daily FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
               "SELECT ds, SUM(amount) AS total FROM events GROUP BY ds")
    created = time.time()
    _scheduled(gw, "daily")
    assert gw.history("daily", limit=1)[0]["outcome"] == "SKIPPED"
    [daily] = table_statuses(gw)          # the skip found the data current: its age counts from then
    assert daily.data_age.total_seconds() <= time.time() - created
    gw.execute("ALTER MATERIALIZED TABLE daily REFRESH")                  # asked for: it runs
    assert gw.history("daily", limit=1)[0]["outcome"] == "SUCCEEDED"
    spark.sql("INSERT INTO events VALUES ('2024-01-09', 1, 1.0)")
    _scheduled(gw, "daily")
    assert gw.history("daily", limit=1)[0]["outcome"] == "SUCCEEDED"
    assert matches(spark, "daily", "SELECT ds, SUM(amount) AS total FROM events GROUP BY ds")
    gw.execute("ALTER MATERIALIZED TABLE daily AS SELECT ds, SUM(amount) * 2 AS total FROM events GROUP BY ds")
    _scheduled(gw, "daily")                               # a new definition matches no snapshot
    assert gw.history("daily", limit=1)[0]["outcome"] == "SUCCEEDED"
    gw.execute("ALTER MATERIALIZED TABLE daily SET ('compression' = 'gzip')")
    _scheduled(gw, "daily")                               # nor do new options
    assert gw.history("daily", limit=1)[0]["outcome"] == "SUCCEEDED"
    _scheduled(gw, "daily")
    assert gw.history("daily", limit=1)[0]["outcome"] == "SKIPPED"


def test_a_non_deterministic_query_is_said_to_be_recomputed_where_the_user_looks(gw, sources):
    """rand() and uuid() pass CREATE (Spark runs them), and the table is recomputed at every refresh:
    CREATE's result and EXPLAIN say so, not only DESCRIBE."""
    query = "SELECT ds, rand() AS x, uuid() AS id FROM events"
    note = "its query calls RAND, UUID: the table can never equal a new run of its query, and every refresh " \
           "recomputes it"
    [explained] = gw.execute(f"EXPLAIN CREATE MATERIALIZED TABLE r FRESHNESS = INTERVAL '1' DAY AS {query}")
    assert ("note", note) in explained.rows
    [created] = gw.execute(f"CREATE MATERIALIZED TABLE r FRESHNESS = INTERVAL '1' DAY AS {query}")
    assert created.message.endswith(f". Note: {note}."), created.message
    [explained] = gw.execute("EXPLAIN ALTER MATERIALIZED TABLE r REFRESH")
    assert ("note", note) in explained.rows
    [plain] = gw.execute("CREATE MATERIALIZED TABLE p FRESHNESS = INTERVAL '1' DAY AS SELECT ds FROM events")
    assert "Note" not in plain.message
    assert "note" not in dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE p REFRESH")[0].rows)


def test_only_changed_partitions_are_recomputed(spark, gw, db):
    spark.sql("CREATE TABLE sales (product_id INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("CREATE TABLE products (product_id INT, label STRING) USING parquet")
    spark.sql("INSERT INTO sales VALUES (1, 1.0, 'a'), (2, 2.0, 'b'), (3, 3.0, 'c')")
    spark.sql("INSERT INTO products VALUES (1, 'x'), (2, 'y'), (3, 'z')")
    query = ("SELECT s.ds, p.label, SUM(s.amount) AS total FROM sales s JOIN products p "
             "ON s.product_id = p.product_id GROUP BY s.ds, p.label")
    # 'incremental': at a few rows a file, auto's byte counts are mostly Parquet footers, a near tie
    gw.execute(f"CREATE MATERIALIZED TABLE by_day PARTITIONED BY (ds) WITH ('refresh.policy' = 'incremental') "
               f"FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS {query}")
    assert gw.describe("by_day")["change_detection"] == "snapshots of the sources' files, by partition ds"
    spark.sql("INSERT INTO sales VALUES (1, 4.0, 'a')")                 # an append is maintained
    _scheduled(gw, "by_day")
    assert gw.history("by_day", limit=1)[0]["technique"] == "incremental"
    assert matches(spark, "by_day", f"SELECT label, total, ds FROM ({query})")
    spark.sql("INSERT OVERWRITE sales PARTITION (ds = 'b') VALUES (1, 5.0), (2, 2.0)")   # a rewrite of one day
    spark.sql("INSERT INTO sales VALUES (2, 1.0, 'd')")
    _scheduled(gw, "by_day")
    assert gw.history("by_day", limit=1)[0]["partitions"] == {"ds": "b, d"}
    assert matches(spark, "by_day", f"SELECT label, total, ds FROM ({query})")
    spark.sql("INSERT OVERWRITE products VALUES (1, 'w'), (2, 'y'), (3, 'z')")   # every partition
    _scheduled(gw, "by_day")
    assert gw.history("by_day", limit=1)[0]["partitions"] == {}
    assert matches(spark, "by_day", f"SELECT label, total, ds FROM ({query})")


def test_a_recompute_over_many_partition_folders_lists_them_without_a_job(spark, gw, db, tmp_path):
    """Spark lists more than 32 folders of a table with a job of a task per folder as it plans a read;
    a refresh, which asks Spark to list its sources again, has the driver list local ones: the whole
    refresh starts the jobs of plain Spark's write of the query over sources it has listed already,
    for a query with no rule and for a rule's full refresh alike."""
    spark.sql("CREATE TABLE wide (id BIGINT, v DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.range(0, 400, 1, 1).selectExpr("id", "CAST(id % 5 AS DOUBLE) AS v",
                                         "concat('d', CAST(id % 40 AS STRING)) AS ds").write.insertInto("wide")
    queries = {"ranked": "SELECT id, ds, RANK() OVER (PARTITION BY ds ORDER BY v, id) AS r FROM wide",
               "summed": "SELECT ds, SUM(v) AS total FROM wide GROUP BY ds"}
    for name, query in queries.items():
        gw.execute(f"CREATE MATERIALIZED TABLE {name} WITH ('refresh.policy' = 'full') "
                   f"FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS {query}")
    spark.range(400, 410, 1, 1).selectExpr("id", "CAST(id % 5 AS DOUBLE) AS v", "'d1' AS ds").write.insertInto("wide")
    for name, query in queries.items():
        _scheduled(gw, name)
        entry = gw.history(name, limit=1)[0]
        assert entry["technique"] == "full", entry
        if not is_connect(spark):       # a Connect client is not told the server's jobs
            assert entry["jobs"] == _plain_write_jobs(spark, query, tmp_path / name), (name, entry)
        assert matches(spark, name, query)


def _plain_write_jobs(spark, query: str, folder) -> int:
    """The jobs of plain Spark writing the query's result, its sources already listed."""
    spark.sql(query).count()        # lists them (and warms up) first
    tracker, group = spark.sparkContext.statusTracker(), f"plain-{folder.name}"
    spark.sparkContext.setJobGroup(group, "plain")
    try:
        spark.sql(query).write.parquet(str(folder))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(tracker.getJobIdsForGroup(group))


def test_sources_without_a_snapshot_are_recomputed_every_time(spark, gw, sources):
    spark.sql("CREATE VIEW big_events AS SELECT * FROM events WHERE amount > 3")
    gw.execute("CREATE MATERIALIZED TABLE from_view FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
               "SELECT COUNT(*) AS n FROM big_events")
    gw.execute("CREATE MATERIALIZED TABLE today FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
               "SELECT COUNT(*) AS n, current_date() AS day FROM events")
    assert "big_events (its state cannot be told from files)" in gw.describe("from_view")["change_detection"]
    assert "calls current_date" in gw.describe("today")["change_detection"]
    for name in ("from_view", "today"):
        _scheduled(gw, name)
        assert gw.history(name, limit=1)[0]["outcome"] == "SUCCEEDED"


def test_a_stream_keeps_its_own_shuffle_partitions(spark, gw, sources):
    spark.conf.set("spark.sql.shuffle.partitions", "200")       # a user's default session
    try:
        gw.execute("CREATE MATERIALIZED TABLE sums FRESHNESS = INTERVAL '1' SECOND AS " + QUERIES["streamed_sum"])
        assert spark.conf.get("spark.sql.shuffle.partitions") == "200"
        spark.sql("INSERT INTO events VALUES ('2024-01-04', 1, 1.0)")
        wait_for(lambda: matches(spark, "sums", QUERIES["streamed_sum"]), timeout=30)
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
    checkpoint = gw.describe("sums")["refresh_handler"]["checkpoint_location"].removeprefix("file:")
    offsets = sorted(glob.glob(os.path.join(checkpoint, "offsets", "[0-9]*")))
    metadata = json.loads(open(offsets[0], encoding="utf-8").read().splitlines()[1])
    assert int(metadata["conf"]["spark.sql.shuffle.partitions"]) < 200


def test_compare_tells_none_partitions_and_all():
    before = {"s": {"digest": "1", "key": "ds", "column": "ds", "partitions": {"a": "x", "b": "y"}},
              "d": {"digest": "2"}}
    same = json.loads(json.dumps(before))
    assert compare(before, same, volatile=False).change is Change.NONE
    assert compare(before, same, volatile=True).change is Change.ALL
    changed = json.loads(json.dumps(before))
    changed["s"].update(digest="3", partitions={"a": "x", "b": "z", "c": "w"})
    assert (compare(before, changed, False).change, compare(before, changed, False).values) == \
        (Change.PARTITIONS, ("b", "c"))
    changed["d"]["digest"] = "4"                           # a source not partitioned like the table
    assert compare(before, changed, False).change is Change.ALL
    assert compare(before, {**same, "d": {"digest": None}}, False).change is Change.ALL
    assert compare({}, same, False).change is Change.ALL
