"""CONTINUOUS mode: Structured Streaming jobs keep materialized tables fresh."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import wait_for

from mt_magic import Gateway, MaterializedTableError, StateError
from mt_magic.notebook.status import table_statuses

AGGREGATE = "SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY user_id"
FILTERED = "SELECT user_id, amount FROM orders WHERE amount > 2"


def rows(spark, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.sql(sql).collect())


def follows(spark, table: str, query: str, timeout: float = 60) -> None:
    """The table converges to the batch result of its query over the source as it is now."""
    wait_for(lambda: rows(spark, f"SELECT * FROM {table}") == rows(spark, query), timeout=timeout)


@pytest.fixture
def orders(spark, db):
    spark.sql("CREATE TABLE orders (user_id INT, amount DOUBLE) USING parquet")
    spark.sql("INSERT INTO orders VALUES (1, 10.0), (2, 1.0)")
    return "orders"


@pytest.fixture
def per_user(gw, orders):
    """A streamed aggregate (complete mode). A test starts only the jobs it reads: over Spark Connect
    each job's start launches a Python worker in the server, seconds."""
    gw.execute(f"CREATE MATERIALIZED TABLE per_user FRESHNESS = INTERVAL '1' SECOND AS {AGGREGATE}")
    return gw


@pytest.fixture
def big(gw, orders):
    """A streamed filter (append mode)."""
    gw.execute(f"CREATE MATERIALIZED TABLE big FRESHNESS = INTERVAL '1' SECOND AS {FILTERED}")
    return gw


@pytest.fixture
def streaming(per_user, big):
    return per_user


def test_an_idle_stream_that_is_up_to_date_is_not_stale(spark, per_user):
    """No new rows for several triggers: the job keeps looking at its sources, so the table is fresh."""
    follows(spark, "per_user", AGGREGATE)
    time.sleep(4)          # four times the freshness with nothing to read
    wait_for(lambda: not [s for s in table_statuses(per_user) if s.stale], timeout=15)


def test_tables_follow_appended_rows(spark, streaming):
    assert streaming.describe("per_user")["refresh_mode"] == "CONTINUOUS"
    follows(spark, "per_user", AGGREGATE)
    follows(spark, "big", FILTERED)
    spark.sql("INSERT INTO orders VALUES (1, 7.0), (3, 4.0)")
    follows(spark, "per_user", AGGREGATE)
    follows(spark, "big", FILTERED)
    assert rows(spark, "SELECT * FROM big") == [(1, 7.0), (1, 10.0), (3, 4.0)]
    handler = streaming.describe("big")["refresh_handler"]
    assert handler["job_name"] == "Materialized_table_spark_catalog." + spark.catalog.currentDatabase() \
        + ".big_continuous_refresh_job"
    assert handler["output_mode"] == "append" and handler["checkpoint_location"]
    assert streaming.describe("per_user")["refresh_handler"]["output_mode"] == "complete"
    [shown] = streaming.execute("SHOW CREATE MATERIALIZED TABLE big")
    text = shown.rows[0][0]
    assert f"--   streaming_query_id: {handler['streaming_query_id']}" in text
    assert f"--   checkpoint_location: {handler['checkpoint_location']}" in text
    assert text.split("\n-- Refresh handler:")[0].endswith("WHERE amount > 2")
    progress = streaming.progress("per_user")
    assert progress["batch_id"] >= 1 and progress["last_published"] is not None


def test_suspend_append_resume_processes_the_appended_rows_once(spark, streaming, tmp_path):
    follows(spark, "big", FILTERED)
    streaming.execute("ALTER MATERIALIZED TABLE per_user SUSPEND")     # no setting: in the store's folder
    assert streaming.describe("per_user")["refresh_handler"]["restore_path"].startswith(
        "file:" + os.path.join(streaming.store.home, "savepoints"))
    streaming.execute(f"SET 'execution.checkpointing.savepoint-dir' = '{tmp_path}/savepoints'")
    streaming.execute("ALTER MATERIALIZED TABLE big SUSPEND")
    with pytest.raises(StateError, match="continuous refresh job has been suspended"):
        streaming.execute("ALTER MATERIALIZED TABLE big SUSPEND")
    handler = streaming.describe("big")["refresh_handler"]
    assert handler["restore_path"].startswith(f"file:{tmp_path}/savepoints")
    before = rows(spark, "SELECT * FROM big")
    spark.sql("INSERT INTO orders VALUES (5, 50.0), (5, 60.0)")
    assert rows(spark, "SELECT * FROM big") == before          # stopped: nothing moves
    streaming.execute("ALTER MATERIALIZED TABLE big RESUME WITH ('compression' = 'gzip'); "
                      "ALTER MATERIALIZED TABLE per_user RESUME")
    with pytest.raises(StateError, match="continuous refresh job has been resumed"):
        streaming.execute("ALTER MATERIALIZED TABLE big RESUME")
    follows(spark, "big", FILTERED)
    follows(spark, "per_user", AGGREGATE)
    assert rows(spark, "SELECT * FROM big") == sorted(before + [(5, 50.0), (5, 60.0)])
    described = streaming.describe("big")
    assert "compression" not in described["options"]
    assert described["refresh_handler"]["dynamic_options"] == {"compression": "gzip"}
    assert "restore_path" not in described["refresh_handler"]


def test_alter_as_appends_a_column_and_starts_fresh(spark, big):
    follows(spark, "big", FILTERED)
    old = big.describe("big")["refresh_handler"]
    big.execute("ALTER MATERIALIZED TABLE big AS SELECT user_id, amount, amount * 2 AS twice "
                "FROM orders WHERE amount > 2")
    new = big.describe("big")["refresh_handler"]
    assert new["streaming_query_id"] != old["streaming_query_id"]
    assert new["checkpoint_location"] != old["checkpoint_location"]
    spark.sql("INSERT INTO orders VALUES (4, 8.0)")
    follows(spark, "big", "SELECT user_id, amount, amount * 2 FROM orders WHERE amount > 2")


def test_a_failing_job_is_restarted_then_suspended_with_the_reason(spark, gw, orders):
    gw.execute("SET 'materialized-table.refresh.max-consecutive-failures' = '2'")
    gw.execute("CREATE MATERIALIZED TABLE checked FRESHNESS = INTERVAL '1' SECOND AS "
               "SELECT user_id, assert_true(amount < 100, 'amount too large') AS ok FROM orders")
    spark.sql("INSERT INTO orders VALUES (9, 1000.0)")
    described = wait_for(lambda: (lambda d: d if d["refresh_status"] == "SUSPENDED" else None)(
        gw.describe("checked")), timeout=90)
    handler = described["refresh_handler"]
    assert handler["restarts"] == 1 and "amount too large" in handler["failure"]      # restarted once
    assert described["consecutive_failures"] == 2 and "amount too large" in described["suspend_reason"]
    assert not gw.pipelines.streams.running(described["identifier"])   # never ACTIVATED without a job
    gw.execute("ALTER MATERIALIZED TABLE checked RESUME")                # from the checkpoint
    assert (gw.describe("checked")["consecutive_failures"], gw.describe("checked")["suspend_reason"]) == (0, None)


def test_drop_removes_job_data_and_checkpoint(spark, streaming):
    follows(spark, "big", FILTERED)
    table = streaming.store.get(streaming.describe("big")["identifier"])
    checkpoint = table.job.checkpoint_location.removeprefix("file:")
    root = table.storage.root.removeprefix("file:")
    assert os.path.isdir(checkpoint) and os.path.isdir(root)
    streaming.execute("DROP MATERIALIZED TABLE big")
    assert not os.path.exists(checkpoint) and not os.path.exists(root)
    assert [q.name for q in spark.streams.active] == [
        streaming.describe("per_user")["refresh_handler"]["job_name"]]


def test_set_freshness_moves_between_continuous_and_full(spark, gw, orders):
    gw.execute(f"CREATE MATERIALIZED TABLE per_user FRESHNESS = INTERVAL '10' SECOND AS {AGGREGATE}")
    follows(spark, "per_user", AGGREGATE)
    gw.execute("ALTER MATERIALIZED TABLE per_user SET FRESHNESS = INTERVAL '1' HOUR")
    described = gw.describe("per_user")
    assert described["refresh_mode"] == "FULL" and not spark.streams.active
    assert described["refresh_handler"]["cron_expression"] == "0 0 0/1 * * ? *"
    assert gw.pipelines.scheduler.next_fire_time(described["identifier"]) is not None
    gw.execute("ALTER MATERIALIZED TABLE per_user SET FRESHNESS = INTERVAL '1' SECOND")
    described = gw.describe("per_user")
    assert described["refresh_mode"] == "CONTINUOUS" and not gw.pipelines.scheduler.has(described["identifier"])
    spark.sql("INSERT INTO orders VALUES (7, 70.0)")
    follows(spark, "per_user", AGGREGATE)


def test_manual_refresh_beside_the_stream(spark, per_user):
    follows(spark, "per_user", AGGREGATE)
    [result] = per_user.execute("ALTER MATERIALIZED TABLE per_user REFRESH")
    assert "Refreshed" in result.message
    assert rows(spark, "SELECT * FROM per_user") == rows(spark, AGGREGATE)


def test_restart_resumes_and_sigkill_converges_without_duplicates(spark, db, tmp_path, store_path):
    source = str(tmp_path / "orders")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "kill_stream.py"), store_path,
         f"file:{source}", str(tmp_path / "wh2"), db],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "worker.log", "w"), env=env,
        start_new_session=True, text=True, cwd=str(tmp_path))
    try:
        for line in worker.stdout:           # fed while batches commit, then killed mid-stream
            if line.startswith("appended") and line.split()[-1] not in ("None", "0", "1", "2"):
                break
        else:
            raise AssertionError((tmp_path / "worker.log").read_text()[-2000:])
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)
    spark.sql(f"CREATE TABLE orders (user_id INT, amount DOUBLE) USING parquet LOCATION 'file:{source}'")
    restarted = Gateway(spark, catalog_store=store_path)
    try:
        # The streams restart in the background (minutes on a loaded CI host: it once took 219 s in all).
        assert restarted.restored(300)
        assert {q.name for q in spark.streams.active} == {
            restarted.describe(t)["refresh_handler"]["job_name"] for t in ("per_user", "big")}
        follows(spark, "per_user", AGGREGATE, timeout=300)
        follows(spark, "big", FILTERED, timeout=300)      # a multiset: duplicates would show
        spark.sql("INSERT INTO orders VALUES (1, 99.0)")
        follows(spark, "big", FILTERED, timeout=300)
    finally:
        restarted.close()
    assert not spark.streams.active


@pytest.mark.processes      # a user's own classic session, its JVM's output on the process's stderr
def test_a_rewritten_streamed_source_prints_no_java_text_in_a_users_process(tmp_path):
    """A day of the streamed source overwritten twice: the table follows each state, and the process
    shows no Spark ERROR record nor Java stack (a batch the sink left unread used to fail the stream
    with Spark's state store commit validation, its whole stack on the user's console). A stream
    suspended while its batch writes waits for the write and shows no Java text either (the stop
    interrupted the write: Spark logged its abort, and matched the batch's interrupted traceback with a
    regular expression that overflowed the stream thread's stack). A stream suspended in its first batch
    and resumed at once runs on (the stopped run's end, reported after the new run started, was taken
    for the new run's failure: it restarted beside itself until the table was suspended). Nor Hadoop's
    warning, with its stack, when a stopped stream's checkpoint write is interrupted, nor Spark's record of
    a broadcast whose thread a stop interrupted (each failed a CI run)."""
    worker = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "user_session_stream.py"),
         str(tmp_path / "store" / "catalog.json"), str(tmp_path / "wh")],
        capture_output=True, text=True, timeout=400, cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert worker.stdout.split("\n")[:8] == ["d1 = 1000", "d1 = 1500", "d1 = 700", "suspend waited True",
                                             "slow = [1, 2]"] + [f"quick{i} ACTIVATED 0" for i in range(3)]
    java = [line for line in worker.stderr.splitlines()
            if " ERROR " in line or line.startswith("\tat ") or "Exception in thread" in line]
    assert not java, "\n".join(java[:20])


def test_running_a_notebook_again_leaves_a_table_and_its_job_alone(per_user):
    before = per_user.describe("per_user")["refresh_handler"]["streaming_query_id"]
    with pytest.raises(MaterializedTableError, match="already exists; CREATE OR ALTER MATERIALIZED TABLE"):
        per_user.execute(f"CREATE MATERIALIZED TABLE per_user FRESHNESS = INTERVAL '1' SECOND AS {AGGREGATE}")
    [result] = per_user.execute(f"CREATE OR ALTER MATERIALIZED TABLE per_user FRESHNESS = INTERVAL '1' SECOND "
                                f"AS {AGGREGATE}")
    assert result.message.endswith("per_user is unchanged.")
    assert per_user.describe("per_user")["refresh_handler"]["streaming_query_id"] == before
