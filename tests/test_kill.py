"""A refresh killed with SIGKILL (Python and JVM) leaves the previous data readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import table_rows, wait_for
from mt_magic import Gateway
from mt_magic.catalog.jsonfile import store_home
from mt_magic.catalog.store import CatalogStore
from mt_magic.storage.writers import WRITER_NOTE


def write_source(spark, path: str, gen: int, pause_ms: int) -> None:
    frame = spark.range(20).selectExpr("CAST(id AS INT) AS id", f"{gen} AS gen", f"CAST({pause_ms} AS BIGINT) AS pause")
    frame.coalesce(1).write.mode("overwrite").parquet(path)


def test_sigkill_mid_refresh_keeps_the_old_version(spark, db, tmp_path, store_path):
    source = str(tmp_path / "src")
    write_source(spark, source, gen=1, pause_ms=0)
    spark.sql(f"CREATE TABLE src (id INT, gen INT, pause BIGINT) USING parquet LOCATION '{source}'")
    gateway = Gateway(spark, catalog_store=store_path)
    gateway.execute(f"CREATE MATERIALIZED TABLE mt REFRESH_MODE = FULL AS SELECT id, gen, "
                    f"reflect('java.lang.Thread', 'sleep', pause) AS slept FROM {db}.src")
    before = table_rows(spark, "mt")
    identifier = gateway.describe("mt")["identifier"]
    root = gateway.store.get(identifier).storage.root.removeprefix("file:")
    before_location = gateway.store.get(identifier).storage.location
    gateway.close()
    write_source(spark, source, gen=2, pause_ms=400)       # the next refresh takes ~8 s

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "kill_refresh.py"), store_path,
         f"file:{source}", str(tmp_path / "wh2"), db],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "worker.log", "w"), env=env, start_new_session=True, text=True,
        cwd=str(tmp_path))
    try:
        def writing() -> bool:
            return any("_temporary" in dirs for _, dirs, _ in os.walk(root))
        wait_for(writing, timeout=120, interval=0.1)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(30)
    assert "finished" not in worker.stdout.read()

    assert table_rows(spark, "mt") == before                       # this session still reads the old version
    spark.sql(f"DROP TABLE {db}.mt")                                # and so does a new one
    versions = sorted(n for n in os.listdir(root) if n.startswith("v-") and WRITER_NOTE not in n)
    assert len(versions) == 2                                      # the published one and the killed write
    restarted = Gateway(spark, catalog_store=store_path,
                        config={"materialized-table.storage.version-retention": "1 s"})
    try:
        assert table_rows(spark, "mt") == before
        assert {r[1] for r in before} == {1}
        assert restarted.describe("mt")["refresh_status"] == "ACTIVATED"
        # The killed writer's version is abandoned, not in flight: the owner marked it when it
        # started, and the sweep after the next refresh deletes it.
        time.sleep(1.1)
        restarted.execute("ALTER MATERIALIZED TABLE mt REFRESH")
        [killed] = [v for v in versions if v not in before_location]
        assert not [n for n in os.listdir(root) if n.startswith(killed)]       # its writer's note too
    finally:
        restarted.close()


def run_until_killed(tmp_path, script: str, *args: str) -> str:
    """Run a test script that SIGKILLs itself at its chosen point; its output, and its JVM gone too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), script), *args],
                              stdout=subprocess.PIPE, stderr=open(tmp_path / f"{script}.log", "w"), env=env,
                              start_new_session=True, text=True, cwd=str(tmp_path))
    try:
        output, _ = worker.communicate(timeout=240)
    finally:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.wait(30)
    assert worker.returncode == -signal.SIGKILL and "killed" in output and "finished" not in output, \
        (tmp_path / f"{script}.log").read_text()[-3000:]
    return output


def test_sigkill_mid_drop_leaves_no_table_and_the_next_owner_deletes_the_rest(spark, db, sales, tmp_path,
                                                                              store_path):
    gateway = Gateway(spark, catalog_store=store_path)
    gateway.execute("CREATE MATERIALIZED TABLE mt PARTITIONED BY (ds) REFRESH_MODE = FULL AS "
                    "SELECT ds, product_id, amount FROM sales")
    identifier = gateway.describe("mt")["identifier"]
    root = gateway.store.get(identifier).storage.root.removeprefix("file:")
    gateway.close()

    run_until_killed(tmp_path, "kill_drop.py", store_path, str(tmp_path / "wh2"), identifier)
    assert os.path.isdir(root)                                 # killed while deleting the data …
    assert CatalogStore(store_path).get(identifier) is None    # … after the table was gone for every reader
    assert spark.catalog.tableExists(f"{db}.mt")               # a persistent catalog still has its entry

    restarted = Gateway(spark, catalog_store=store_path)
    try:
        assert not spark.catalog.tableExists(f"{db}.mt") and not os.path.exists(root)
        assert restarted.store.dropping() == []
        restarted.execute("CREATE MATERIALIZED TABLE mt REFRESH_MODE = FULL AS SELECT * FROM sales")
        assert table_rows(spark, "mt") == table_rows(spark, "sales")
    finally:
        restarted.close()


def test_sigkill_between_the_renames_of_a_replace_is_swept_by_the_next_owner(spark, db, tmp_path, store_path):
    warehouse = tmp_path / "wh2"
    run_until_killed(tmp_path, "kill_table_as.py", store_path, str(warehouse), db)
    folder = warehouse / f"{db}.db" / "t"
    old, new = sorted(os.listdir(folder))          # the table's version folders, oldest first
    # the killed process's in-memory catalog died with it: its folders are all that is left
    restarted = Gateway(spark, catalog_store=store_path)
    try:
        assert os.listdir(folder) == [old]         # the unpublished one deleted, the old one retired
        pending = os.path.join(store_home(store_path), ".pending")
        assert [n.split("-")[0] for n in os.listdir(pending) if not n.startswith(".")] == ["retired"]
    finally:
        restarted.close()


def test_a_write_killed_inside_the_store_leaves_no_temporary_file_for_long(spark, db, tmp_path, store_path):
    code = ("import os, signal, sys\n"
            "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from mt_magic.catalog.store import CatalogStore\n"
            "CatalogStore(sys.argv[1])\n")
    worker = subprocess.run([sys.executable, "-c", code, store_path], env={**os.environ, "PYTHONPATH": os.pathsep.join(
        sys.path)}, timeout=60)
    assert worker.returncode == -signal.SIGKILL
    folder = os.path.dirname(store_path)
    (torn,) = [n for n in os.listdir(folder) if n.endswith(".tmp")]
    gateway = Gateway(spark, catalog_store=store_path)        # a write this young may still be in flight
    gateway.close()
    assert os.path.exists(os.path.join(folder, torn))
    os.utime(os.path.join(folder, torn), (time.time() - 3600,) * 2)
    gateway = Gateway(spark, catalog_store=store_path)
    gateway.close()
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]


@pytest.mark.processes      # the killed process is a classic session whatever the suite's kind
@pytest.mark.parametrize("point, having, layout", [
    ("begun", "", ""), ("written", "", ""), ("published", "", ""), ("manifest", "", ""),   # the state in the data's files
    ("state-written", " HAVING COUNT(*) > 0", ""), ("state-moved", " HAVING COUNT(*) > 0", ""),     # a state apart
    # a day of a partitioned source rewritten: its partials retracted, the partials kept per day staged
    ("state-written", "", "partitioned"), ("partials-moved", "", "partitioned"), ("manifest", "", "partitioned"),
    ("partials-moved", "", "below"),        # joined with a dimension: its partials kept below the join
    ("partials-moved", "", "chain"),        # over a table that retracted a day: its partials kept by that table's file
    # the same for a filter: its rows kept by day, the rewritten day's files replaced
    ("flattened", "", "linear"), ("published", "", "linear")])
def test_sigkill_in_an_incremental_refresh_leaves_state_and_data_that_agree(spark, db, tmp_path, store_path,
                                                                            point, having, layout):
    source = str(tmp_path / "src")
    partitioned = layout in ("partitioned", "linear", "below", "chain")
    spark.sql(f"CREATE TABLE src (k INT, amount DOUBLE{', ds STRING' if partitioned else ''}) USING parquet "
              f"{'PARTITIONED BY (ds) ' if partitioned else ''}LOCATION '{source}'")

    def values(*rows) -> str:        # (k, amount, day): the day where the source has days
        return ", ".join(f"({k}, {amount}, '{d}')" if partitioned else f"({k}, {amount})" for k, amount, d in rows)

    spark.sql(f"INSERT INTO src VALUES {values((1, 1.0, 'a'), (2, 2.0, 'b'), ('NULL', 3.0, 'a'))}")
    query = "SELECT k, amount * 2 AS a2, ds FROM src WHERE amount > 0" if layout == "linear" else \
        f"SELECT k, COUNT(*) AS n, SUM(amount) AS total, MIN(amount) AS lo FROM src GROUP BY k{having}"
    if layout == "below":
        spark.sql(f"CREATE TABLE dm (k INT, region STRING) USING parquet LOCATION '{source}_dim'")
        spark.sql("INSERT INTO dm VALUES (1, 'x'), (2, 'y'), (3, 'x'), (4, 'z')")
        query = "SELECT d.region, COUNT(*) AS n, SUM(s.amount) AS total, MIN(s.amount) AS lo FROM src s JOIN dm d " \
                "ON s.k = d.k GROUP BY d.region"
    gateway = Gateway(spark, catalog_store=store_path)
    upstream = ["up"] if layout == "chain" else []      # refreshed before the table reading it
    if upstream:
        gateway.execute("CREATE MATERIALIZED TABLE up WITH ('refresh.policy' = 'incremental') FRESHNESS = INTERVAL "
                        "'1' DAY REFRESH_MODE = FULL AS SELECT k, amount, ds FROM src WHERE amount > 0")
        query = query.replace("FROM src", "FROM up")
    gateway.execute(f"CREATE MATERIALIZED TABLE mt WITH ('refresh.policy' = 'incremental') FRESHNESS = INTERVAL '1' DAY "
                    f"REFRESH_MODE = FULL AS {query}")     # a tiny day is most of the source: auto would recompute
    if partitioned:
        spark.sql("INSERT OVERWRITE src PARTITION (ds = 'a') VALUES (1, 0.5), (3, 4.0)")
    else:
        spark.sql("INSERT INTO src VALUES (1, 0.5), (3, 4.0)")
    if layout == "linear":       # two days: the filter's rows are written split by day, then moved up
        spark.sql("INSERT OVERWRITE src PARTITION (ds = 'b') VALUES (2, 5.0)")
    for name in upstream:
        gateway.execute(f"ALTER MATERIALIZED TABLE {name} REFRESH")
    gateway.close()
    before = table_rows(spark, "mt")

    run_until_killed(tmp_path, "kill_incremental.py", store_path, f"file:{source}", str(tmp_path / "wh2"), db, point,
                     layout or "plain")
    spark.sql(f"REFRESH TABLE {db}.mt")
    assert table_rows(spark, "mt") in (before, _query_rows(spark, query))   # the old or the new version
    restarted = Gateway(spark, catalog_store=store_path)
    try:
        changes = [f"INSERT INTO src VALUES {values((2, 1.0, 'b'), (4, 1.5, 'c'))}",
                   f"INSERT INTO src VALUES {values((1, -1.0, 'a'))}"]
        if partitioned:        # a day rewritten again: retracted from the partials the restarted refreshes keep
            changes.append("INSERT OVERWRITE src PARTITION (ds = 'b') VALUES (2, 7.0)")
        if layout == "below":  # the dimension rewritten: joined again with the partials kept
            changes.append("INSERT OVERWRITE dm VALUES (1, 'y'), (2, 'y'), (4, 'x')")
        for change in changes:        # the next refreshes build on what was left
            spark.sql(change)
            for name in [*upstream, "mt"]:
                restarted.execute(f"ALTER MATERIALIZED TABLE {name} REFRESH")
            assert table_rows(spark, "mt") == _query_rows(spark, query)
        assert restarted.history("mt", limit=1)[0]["technique"] == "incremental"
    finally:
        restarted.close()


def _query_rows(spark, query: str) -> set[tuple]:
    return {tuple(r) for r in spark.sql(query).collect()}
