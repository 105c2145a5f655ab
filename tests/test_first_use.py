"""First use over Spark Connect and the service, as a new user meets it: scripts exit, a client finds
the service's store and shares its catalog, Python workers need no PYSPARK_PYTHON, nothing prints."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_service import Service, _env, client, scheduled

from mt_magic.catalog.store import CatalogStore

SCRIPT = """\
import sys, time
from mt_magic import Gateway
from mt_magic.session import local_session

spark = local_session("first-use", warehouse={warehouse!r}, remote={remote!r})
gw = Gateway(spark, catalog_store={store!r})
gw.execute("SHOW MATERIALIZED TABLES")
{body}
print("end", time.time(), flush=True)
{ending}
"""


def run_script(tmp_path: Path, body: str = "", ending: str = "", env: dict | None = None,
               remote: str | None = "local[2]") -> tuple[float, str, str]:
    """Run a script (over Connect unless `remote` is None); returns the seconds from its last line to
    its exit, and its output."""
    path = tmp_path / "script.py"
    path.write_text(SCRIPT.format(warehouse=str(tmp_path / "warehouse"), store=str(tmp_path / "store.json"),
                                  body=textwrap.dedent(body), ending=ending, remote=remote))
    process = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env or _env(), cwd=tmp_path, start_new_session=True)
    try:
        out, err = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        out, err = process.communicate()
        pytest.fail(f"the script did not exit within 180 s:\n{out}\n{err}")
    ends = [line.split()[1] for line in out.splitlines() if line.startswith("end ")]
    assert ends, f"the script failed:\n{out}\n{err}"
    ended = float(ends[0])
    return time.time() - ended, out, err


@pytest.mark.processes
@pytest.mark.parametrize("ending", ["", "gw.close()", "raise RuntimeError('the user script failed')"])
def test_a_connect_script_exits_by_itself(tmp_path, ending):
    """… and the Spark logs that ended processes left in the temporary folder go when a session
    starts (one per kernel piled up); a live process's stays."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True).stdout.strip()
    for pid in (ended, str(os.getpid())):
        (temporary / f"mt_magic-spark-{pid}.log").write_text("a JVM's banner\n")
    seconds, _, err = run_script(tmp_path, ending=ending, env={**_env(), "TMPDIR": str(temporary)})
    assert seconds < 15
    assert ("RuntimeError: the user script failed" in err) == ("raise" in ending)
    assert not (temporary / f"mt_magic-spark-{ended}.log").exists()
    assert (temporary / f"mt_magic-spark-{os.getpid()}.log").exists()


@pytest.mark.processes
def test_continuous_over_connect_needs_no_pyspark_python_and_prints_nothing(tmp_path):
    env = _env()
    env.pop("PYSPARK_PYTHON", None)       # 'python3' on the PATH is not this environment's interpreter
    seconds, out, err = run_script(tmp_path, body="""
        spark.sql("CREATE TABLE src (a INT) USING parquet")
        spark.sql("INSERT INTO src VALUES (1), (2)")
        gw.execute("CREATE MATERIALIZED TABLE copy FRESHNESS = INTERVAL '1' SECOND AS SELECT a FROM src")
        spark.sql("INSERT INTO src VALUES (3)")
        deadline = time.monotonic() + 60
        while spark.table("copy").count() != 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        print("rows", spark.table("copy").count(), flush=True)
        gw.close()
    """, env=env)
    assert "rows 3" in out
    assert seconds < 15
    # Spark's banner, the JVM's warnings and the Connect workers' lines stay out of the user's output.
    assert err == "", err
    assert [line.split()[0] for line in out.splitlines()] == ["rows", "end"], out


@pytest.mark.processes
def test_a_client_of_the_service_finds_its_store_and_shares_its_default_catalog(tmp_path):
    """A service on Spark's in-memory catalog: a client names no store, creates a source and a
    materialized table over it; the service owns and refreshes it."""
    service = Service(tmp_path, "service", hive=False)
    try:
        client(tmp_path, service.url, """
            assert gw.store.path == %r, gw.store.path
            assert gw.owner()["kind"] == "service" and not gw.owner()["this_gateway"], gw.owner()
            spark.sql("CREATE TABLE msrc (a INT) USING parquet")
            spark.sql("INSERT INTO msrc VALUES (1), (2)")
            gw.execute("CREATE MATERIALIZED TABLE mf FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = FULL "
                       "AS SELECT COUNT(*) AS n FROM msrc")
            say(spark.table("mf").first().n)
        """ % str(service.store), "creator", store="-")
        assert not (tmp_path / ".mt_magic").exists()                      # no second store
        assert CatalogStore(str(service.store)).get("spark_catalog.default.mf") is not None
        from helpers import wait_for
        wait_for(lambda: scheduled(service.store, "mf", service.process.pid), timeout=60)
    finally:
        assert service.stop() == 0, service.log.read_text()


@pytest.mark.processes
@pytest.mark.parametrize("remote", [None, "local[2]"])
def test_a_notebook_that_creates_its_sources_runs_again_after_a_restart(tmp_path, remote):
    """A kernel restart forgets Spark's in-memory catalog, not the warehouse: the second run finds its
    tables again, and overwriting them works as with a persistent catalog."""
    body = """
        spark.sql("CREATE DATABASE IF NOT EXISTS shop")
        run = len(spark.catalog.listTables("shop"))
        spark.range(5 + run).write.mode("overwrite").saveAsTable("sales")
        (spark.range(6).selectExpr("id", "CAST(id % 2 AS STRING) AS g")
         .write.mode("overwrite").partitionBy("g").saveAsTable("shop.parts"))
        spark.sql("CREATE TABLE IF NOT EXISTS shop.kept USING parquet AS SELECT 1 AS one")
        print("counts", spark.table("sales").count(), spark.table("shop.parts").count(),
              spark.table("shop.kept").count(), flush=True)
    """
    for expected in ("counts 5 6 1", "counts 7 6 1"):      # the second run found shop's two tables
        _, out, err = run_script(tmp_path, body=body, remote=remote)
        assert expected in out, out + err
