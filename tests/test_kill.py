"""A refresh killed with SIGKILL (Python and JVM) leaves the previous data readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from helpers import table_rows, wait_for
from mt_magic import Gateway


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
    restarted = Gateway(spark, catalog_store=store_path)
    try:
        assert table_rows(spark, "mt") == before
        assert {r[1] for r in before} == {1}
        assert restarted.describe("mt")["refresh_status"] == "ACTIVATED"
    finally:
        restarted.close()
