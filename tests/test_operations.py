"""Operating materialized tables: history in Python and SQL, failures and auto-suspend, missed runs,
coalesced fires, dependency order, backfill, EXPLAIN."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import table_rows, wait_for

from mt_magic import Gateway, MaterializedTableError
from mt_magic.manager.pipelines import RECENT
from mt_magic.notebook.status import table_statuses
from mt_magic.refresh.scheduler import RefreshScheduler
from mt_magic.sql.zones import zone_named
from mt_magic.sql.freshness import IntervalFreshness

DAILY = ("CREATE MATERIALIZED TABLE daily PARTITIONED BY (ds) "
         "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd') FRESHNESS = INTERVAL '1' DAY "
         "REFRESH_MODE = FULL AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")


def test_every_refresh_is_in_the_history_and_in_sql(spark, gw, sales, store_path):
    gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
               "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    for _ in range(31):
        gw.execute("ALTER MATERIALIZED TABLE t REFRESH")
    manual = [e for e in gw.history("t") if e["trigger"] == "manual"]
    assert len(manual) == 31 and all(e["outcome"] == "SUCCEEDED" for e in manual)
    assert all(e["lag_s"] is not None and e["freshness_s"] == 3600 for e in manual)
    sql = spark.sql("SELECT trigger, COUNT(*) AS n FROM mt_refresh_history('t') GROUP BY trigger").collect()
    counted = {r["trigger"]: r["n"] for r in sql}      # (the hourly schedule may fire once meanwhile: a test at :00)
    assert (counted.pop("manual"), counted.pop("initial")) == (31, 1) and set(counted) <= {"scheduled"}, counted
    assert spark.sql("SELECT COUNT(*) FROM mt_refresh_history('nope')").first()[0] == 0
    with open(store_path, encoding="utf-8") as handle:      # the record does not grow with the history
        assert "refresh_history" not in handle.read()


def test_failed_runs_suspend_the_table_and_resume_clears_them(spark, gw, sales, store_path):
    gw.execute("SET 'materialized-table.refresh.retries' = '0'")
    gw.execute("SET 'materialized-table.refresh.max-consecutive-failures' = '3'")
    gw.execute("CREATE MATERIALIZED TABLE checked FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL AS "
               "SELECT ds, assert_true(amount < 100, 'amount too large') AS ok, amount FROM sales")
    before = table_rows(spark, "checked")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 9, 1000.0)")
    described = wait_for(lambda: (lambda d: d if d["refresh_status"] == "SUSPENDED" else None)(
        gw.describe("checked")), timeout=60)
    assert described["consecutive_failures"] == 3
    assert "3 consecutive failed refreshes" in described["suspend_reason"]
    assert "amount too large" in described["suspend_reason"]
    # The reason is where the user looks: the dashboard's status and `mt-magic status`.
    [status] = [s for s in table_statuses(gw) if s.name == "checked"]
    assert status.status == "SUSPENDED" and "3 consecutive failed refreshes" in status.error
    printed = subprocess.run([sys.executable, "-m", "mt_magic", "status", "--store", store_path],
                             capture_output=True, text=True, check=True).stdout
    assert "SUSPENDED (3 consecutive failed refreshes" in printed, printed
    helped = subprocess.run([sys.executable, "-m", "mt_magic", "status", "--help"], capture_output=True, text=True,
                            check=True).stdout     # which store it reads when --store is not given
    assert "(default: $MT_MAGIC_CATALOG_STORE, else .mt_magic/catalog.json)" in " ".join(helped.split()), helped
    assert table_rows(spark, "checked") == before                   # the old data stays readable
    # three failed runs, and no more once suspended (not a fire queued behind the third, as seen on a busy machine)
    assert [e["outcome"] for e in gw.history("checked")].count("FAILED") == 3
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-01-03', 9, 10.0)")
    gw.execute("ALTER MATERIALIZED TABLE checked RESUME")
    described = gw.describe("checked")
    assert (described["refresh_status"], described["consecutive_failures"], described["suspend_reason"]) == \
        ("ACTIVATED", 0, None)
    # a run since the failures succeeded (newest first; the fires after it skip, each second)
    wait_for(lambda: any(e["outcome"] == "SUCCEEDED" for e in itertools.takewhile(
        lambda e: e["outcome"] != "FAILED", gw.history("checked"))), timeout=30)
    assert sorted(r.amount for r in spark.table("checked").collect()) == \
        sorted(r.amount for r in spark.table("sales").collect())


def test_a_skip_proves_the_data_current_in_status_describe_and_the_dashboard(spark, gw, sales, store_path):
    """A scheduled fire that found no source changed shows the data as current as that fire: its age
    counts from the skip in `mt-magic status`, DESCRIBE and the dashboard of any gateway on the store
    (they said `16 s / 5 SECOND STALE` right after one: the age of the last refresh that wrote)."""
    gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL AS SELECT * FROM sales")
    published = datetime.fromisoformat(gw.describe("t")["last_refresh"]["started_at"])
    skip = wait_for(lambda: next((e for e in gw.history("t") if e["outcome"] == "SKIPPED" and
                                  datetime.fromisoformat(e["finished"]) - published > timedelta(seconds=5)), None),
                    timeout=30)
    printed = subprocess.run([sys.executable, "-m", "mt_magic", "status", "--store", store_path],
                             capture_output=True, text=True, check=True).stdout
    [row] = [line for line in printed.splitlines() if line.startswith(gw.describe("t")["identifier"])]
    assert "STALE" not in row, printed
    skipped = datetime.fromisoformat(skip["finished"])
    assert datetime.fromisoformat(gw.describe("t")["up_to_date_as_of"]) >= skipped
    [described] = gw.execute("DESCRIBE t")
    assert datetime.fromisoformat(dict((r[0], r[1]) for r in described.rows)["Up To Date As Of"]) >= skipped
    client = Gateway(spark, catalog_store=store_path)     # another gateway: it ran none of the skips
    try:
        [status] = [s for s in table_statuses(client) if s.name == "t"]
        assert status.data_age <= datetime.now(timezone.utc) - skipped
    finally:
        client.close()


@pytest.mark.parametrize("policy, least, most", [("latest", 1, 1), ("all", 3, 99), ("skip", 0, 0)])
def test_missed_runs_after_a_downtime_follow_the_policy(spark, db, sales, store_path, policy, least, most):
    first = Gateway(spark, catalog_store=store_path)
    first.execute("CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL AS "
                  "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    wait_for(lambda: any(e["trigger"] == "scheduled" for e in first.history("mt")), timeout=30)
    first.close()
    time.sleep(4.5)                                      # four fires nobody runs
    opened = datetime.now(timezone.utc).isoformat()
    second = Gateway(spark, catalog_store=store_path, config={"materialized-table.missed-runs": policy})
    try:
        # catch-ups start at once; two of the new owner's own fires later they are done
        wait_for(lambda: len([e for e in second.history("mt") if e["trigger"] == "scheduled"
                              and e["started"] > opened]) >= 2, timeout=30)
        catch_ups = [e for e in second.history("mt") if e["trigger"] == "catch-up"]
        assert least <= len(catch_ups) <= most, catch_ups
        times = [e["schedule_time"] for e in reversed(catch_ups)]
        assert times == sorted(times)                          # oldest first
    finally:
        second.close()


def test_a_fire_that_finds_its_refresh_running_is_queued_once():
    runs: list[tuple[float, float]] = []
    merged: list[tuple[str, str, str]] = []

    def slow_refresh(name: str, schedule_time: str) -> None:
        started = time.monotonic()
        time.sleep(2.5)
        runs.append((started, time.monotonic()))

    scheduler = RefreshScheduler(slow_refresh, lambda *fire: merged.append(fire))
    try:
        scheduler.schedule("t", IntervalFreshness.parse("1 SECOND"), zone_named("UTC"))
        wait_for(lambda: len(runs) >= 3, timeout=30, interval=0.1)
    finally:
        scheduler.shutdown()
    # A fire during a run is not dropped: it runs as soon as the run ends, not at the next fire.
    assert all(later[0] - earlier[1] < 0.3 for earlier, later in zip(runs, runs[1:3]))
    # Two fires during one run: the earlier is merged into the later one, and reported.
    assert merged and all(name == "t" and replaced < into for name, replaced, into in merged)


@pytest.mark.parametrize("asks", ["adds", "reads"])
def test_a_job_that_adds_or_reads_a_job_while_the_scheduler_closes_does_not_hang_it(asks):
    """A stream's watcher restarts its stream (adding its job again), or a fire waiting for its upstream
    asks whether they are scheduled, while the gateway closes: APScheduler waits for the job holding
    the lock the job's own call needs. Seen as a hung test teardown."""
    scheduler = RefreshScheduler(lambda *fire: None, lambda *fire: None)
    running, closing, done = threading.Event(), threading.Event(), []

    def watcher() -> None:
        running.set()
        closing.wait(10)
        time.sleep(0.3)                  # the shutdown is waiting for this job by now
        if asks == "adds":
            scheduler.every("restarted", 60, lambda: None)
        else:
            done.append(scheduler.has("watcher"))          # no jobs once closing
        done.append(True)

    scheduler.every("watcher", 0.1, watcher)
    assert running.wait(10)
    closer = threading.Thread(target=scheduler.shutdown, daemon=True)
    closer.start()
    closing.set()
    closer.join(10)
    assert not closer.is_alive() and done == ([True] if asks == "adds" else [False, True])
    assert not scheduler.has("restarted")        # a job added after closing began is not kept


def test_library_warnings_never_print_where_the_application_set_no_logging():
    """Python's last-resort handler would print them into whatever notebook cell runs."""
    printed = subprocess.run([sys.executable, "-c", "import logging, mt_magic\n"
                              "logging.getLogger('apscheduler.scheduler').warning('maximum number of running "
                              "instances reached')\nlogging.getLogger('mt_magic.manager').warning('retried')"],
                             capture_output=True, text=True, check=True)
    assert printed.stderr == "" and printed.stdout == ""


def test_downstream_refreshes_start_after_upstream_for_the_same_fire(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE up FRESHNESS = INTERVAL '3' SECOND REFRESH_MODE = FULL AS "
               "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    gw.execute("CREATE MATERIALIZED TABLE down FRESHNESS = INTERVAL '3' SECOND REFRESH_MODE = FULL AS "
               "SELECT COUNT(*) AS days, SUM(total) AS total FROM up")

    def common() -> list[tuple[dict, dict]]:
        ups = {e["schedule_time"]: e for e in gw.history("up") if e["trigger"] == "scheduled"}
        return [(ups[e["schedule_time"]], e) for e in gw.history("down")
                if e["trigger"] == "scheduled" and e["schedule_time"] in ups]
    for round_ in range(3):
        spark.sql(f"INSERT INTO sales VALUES ('2024-02-0{round_ + 1}', 1, 1.0)")
        wait_for(lambda: len(common()) > round_, timeout=30)
    pairs = common()
    assert all(down["started"] >= up["finished"] for up, down in pairs), pairs
    wait_for(lambda: table_rows(spark, "down") == {tuple(spark.sql(
        "SELECT COUNT(DISTINCT ds), SUM(amount) FROM sales").first())}, timeout=30)


def test_fires_that_wait_for_upstream_tables_hold_no_scheduler_worker(spark, gw, sales):
    """More tables wait for an upstream table than the scheduler has workers (4): another table still
    refreshes every second while they wait, and they run once the upstream table is done."""
    gw.execute("CREATE MATERIALIZED TABLE up FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL AS "
               "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    downs = [f"down{n}" for n in range(6)]
    for name in downs:
        gw.execute(f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '10' SECOND REFRESH_MODE = FULL AS "
                   "SELECT COUNT(*) AS days FROM up")
    gw.execute("CREATE MATERIALIZED TABLE other FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL AS "
               "SELECT COUNT(*) AS n FROM sales")
    zone = zone_named(spark.conf.get("spark.sql.session.timeZone"))
    fire = (int(time.time()) // 10 + 1) * 10        # the downstream tables' next fire
    if fire - time.time() < 2:
        fire += 10

    def fired(name: str, low: float, high: float) -> list[dict]:
        return [e for e in gw.history(name) if e["trigger"] == "scheduled" and
                low <= datetime.strptime(e["schedule_time"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone).timestamp()
                <= high]
    # The upstream table's refresh is busy (its lock held, as by a long refresh elsewhere) across the fire.
    with gw.store.table_lock(gw.describe("up")["identifier"]):
        wait_for(lambda: time.time() >= fire + 5, timeout=20)
        assert all(not fired(name, fire, fire) for name in downs), "the downstream fires did not wait"
        assert len(fired("other", fire, fire + 5)) >= 3, gw.history("other")
    for name in downs:       # each runs its fire once its wait ends (at most its freshness)
        [entry] = wait_for(lambda: fired(name, fire, fire), timeout=30)
        assert entry["outcome"] in ("SUCCEEDED", "SKIPPED"), entry


def test_backfill_runs_each_schedule_time_and_stops_at_a_failure(spark, gw, sales):
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 1, 3.0), ('2024-01-04', 1, 4.0), ('2024-01-05', 1, 5.0)")
    gw.execute("SET 'materialized-table.full.initialize' = 'on-schedule'")
    gw.execute(DAILY)
    [plan] = gw.execute("ALTER MATERIALIZED TABLE daily BACKFILL FROM '2024-01-02' TO '2024-01-05'", dry_run=True)
    assert "would run 3 scheduled refreshes" in plan.message
    result = gw.backfill("daily", "2024-01-02", "2024-01-05")
    assert [row[:2] for row in result.rows] == [("2024-01-02 00:00:00", "ds=2024-01-01"),
                                                ("2024-01-03 00:00:00", "ds=2024-01-02"),
                                                ("2024-01-04 00:00:00", "ds=2024-01-03")]
    assert sorted(r["ds"] for r in spark.table("daily").collect()) == ["2024-01-01", "2024-01-02", "2024-01-03"]
    assert [e["trigger"] for e in gw.history("daily")] == ["backfill"] * 3
    spark.sql("DROP TABLE sales")
    with pytest.raises(MaterializedTableError, match=r"stopped at schedule time 2024-01-06 00:00:00 \(0 of 2 done\)"):
        gw.execute("ALTER MATERIALIZED TABLE daily BACKFILL FROM '2024-01-06' TO '2024-01-08'")


def test_explain_says_what_a_refresh_would_do_and_changes_nothing(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS "
               "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    [explained] = gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")
    rows = dict(explained.rows)
    assert rows["a scheduled refresh now"].startswith("would skip")
    assert rows[f"source spark_catalog.{spark.catalog.currentDatabase()}.sales"] == "unchanged"
    assert "HashAggregate" in rows["Spark plan"]
    spark.sql("INSERT INTO sales VALUES ('2024-01-09', 1, 1.0)")
    history = gw.history("t")
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert rows["a scheduled refresh now"] == "would refresh incremental (merge by ds)"
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-01-09', 1, 1.0)")
    rows = dict(gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t REFRESH")[0].rows)
    assert rows["a scheduled refresh now"] == \
        f"would recompute the whole table (spark_catalog.{spark.catalog.currentDatabase()}.sales was rewritten)"
    assert gw.history("t") == history and ("2024-01-09", 1.0) not in table_rows(spark, "t")
    [created] = gw.execute("EXPLAIN CREATE MATERIALIZED TABLE u FRESHNESS = INTERVAL '1' HOUR "
                           "REFRESH_MODE = FULL AS SELECT ds FROM sales")
    assert "would create materialized table" in dict(created.rows)["statement"]
    assert gw.store.list()[0].name == "t" and len(gw.store.list()) == 1
    with pytest.raises(MaterializedTableError, match="EXPLAIN explains ALTER MATERIALIZED TABLE"):
        gw.execute("EXPLAIN ALTER MATERIALIZED TABLE t SUSPEND")


def test_history_sql_function_reads_every_table(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE a FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS SELECT * FROM sales")
    gw.execute("CREATE MATERIALIZED TABLE b FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS SELECT * FROM sales")
    tables = {r[0].rsplit(".", 1)[-1] for r in spark.sql("SELECT table FROM mt_refresh_history(NULL)").collect()}
    assert {"a", "b"} <= tables
    row = spark.sql("SELECT * FROM mt_refresh_history('b')").first()
    assert row["trigger"] == "initial" and json.loads(row["partitions"]) == {} and row["rows"] == 4


def test_concurrent_history_appends_are_all_kept(tmp_path):
    from mt_magic.catalog.history import RefreshEntry, RefreshHistory, Runner, Trigger
    history = RefreshHistory(str(tmp_path / "catalog.json"), retention=150)

    def write(worker: int) -> None:
        for i in range(100):
            history.record(RefreshEntry(f"c.d.t{worker % 2}", Trigger.MANUAL, None, datetime.now().isoformat(),
                                        f"{worker:02d}-{i:03d}", "SUCCEEDED", i, Runner("h", 1, "app")))
    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = [len(history.entries(f"c.d.t{t}")) for t in (0, 1)]
    assert all(150 <= n <= 165 for n in kept), kept          # 200 written each, the newest kept
    assert len(history.entries(limit=7)) == 7


def test_a_stream_that_cannot_restart_is_suspended_not_left_activated(spark, db, store_path):
    spark.sql("CREATE TABLE orders (user_id INT, amount DOUBLE) USING parquet")
    spark.sql("INSERT INTO orders VALUES (1, 1.0)")
    first = Gateway(spark, catalog_store=store_path)
    first.execute("CREATE MATERIALIZED TABLE sums FRESHNESS = INTERVAL '1' SECOND AS "
                  "SELECT user_id, SUM(amount) AS total FROM orders GROUP BY user_id")
    first.close()
    spark.sql("DROP TABLE orders")
    second = Gateway(spark, catalog_store=store_path,
                     config={"materialized-table.refresh.max-consecutive-failures": "1"})
    try:
        assert second.restored(120)
        described = second.describe("sums")
        assert described["refresh_status"] == "SUSPENDED" and "orders" in described["suspend_reason"]
        assert any("sums" in w for w in second.restore_warnings)
    finally:
        second.close()


def test_failed_refreshes_leave_no_version_and_the_data_age_stays_that_of_the_published_one(spark, db, sales,
                                                                                           store_path):
    gateway = Gateway(spark, catalog_store=store_path)
    try:
        gateway.execute("CREATE MATERIALIZED TABLE checked REFRESH_MODE = FULL AS "
                        "SELECT ds, assert_true(amount < 100, 'amount too large') AS ok, amount FROM sales")
        root = gateway.store.get(gateway.describe("checked")["identifier"]).storage.root.removeprefix("file:")
        versions = sorted(os.listdir(root))
        spark.sql("INSERT INTO sales VALUES ('2024-01-03', 9, 1000.0)")
        for _ in range(RECENT + 1):             # more failures than the dashboard reads of the history
            with pytest.raises(MaterializedTableError, match="amount too large"):
                gateway.execute("ALTER MATERIALIZED TABLE checked REFRESH")
        # tasks Spark is still killing may write a moment longer; what they wrote goes too
        wait_for(lambda: sorted(os.listdir(root)) == versions, timeout=10)
        assert all(e["outcome"] == "FAILED" for e in gateway.history("checked", limit=RECENT))
        (status,) = table_statuses(gateway)
        assert status.data_age is not None and status.data_age < timedelta(minutes=5)
    finally:
        gateway.close()
