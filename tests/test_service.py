"""The refresh service and its clients as real processes: `mt-magic serve`, notebook-like clients over
Spark Connect or with their own session, SIGTERM and SIGKILL.

Tests marked `processes` start every process they use, whatever kind of session the suite runs on:
`make test` runs them once, beside its two passes."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from helpers import wait_for
from mt_magic import Gateway
from mt_magic.catalog.history import RefreshHistory
from mt_magic.catalog.lease import Lease
from mt_magic.catalog.store import CatalogStore

TESTS = Path(__file__).parent
# A source, a FULL table refreshed every 5 s and a CONTINUOUS table every 2 s, created by a client.
CREATE_TABLES = """\
spark.sql("CREATE TABLE events (id INT) USING parquet")
spark.sql("INSERT INTO events VALUES (1), (2)")
gw.execute("CREATE MATERIALIZED TABLE counts FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL "
           "AS SELECT COUNT(*) AS n FROM events")
gw.execute("CREATE MATERIALIZED TABLE copy FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = CONTINUOUS "
           "AS SELECT id FROM events")
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("MT_MAGIC_SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Service:
    """`mt-magic serve` on a store, with a Hive catalog that outlives it (as a cluster's metastore), or
    with Spark's default in-memory catalog (`hive=False`)."""

    def __init__(self, work: Path, name: str, master: str = "local[2]", store: Path | None = None,
                 hive: bool = True) -> None:
        self.work, self.port, self.log = work, _free_port(), work / f"{name}.log"
        self.store = store or work / "store" / "catalog.json"
        metastore = f"jdbc:derby:;databaseName={work / 'metastore'};create=true"
        catalog = ["--conf", "spark.sql.catalogImplementation=hive",
                   "--conf", f"spark.hadoop.javax.jdo.option.ConnectionURL={metastore}"] if hive else []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mt_magic", "serve", "--store", str(self.store), "--master", master,
             "--connect-port", str(self.port), "--conf", f"spark.sql.warehouse.dir={work / 'warehouse'}",
             *catalog, "--conf", "spark.sql.shuffle.partitions=2"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env=_env(), cwd=work, start_new_session=True)
        wait_for(lambda: "Serving" in self.log.read_text() or self.process.poll() is not None, timeout=180)
        assert self.process.poll() is None, self.log.read_text()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def stop(self) -> int:
        """SIGTERM to the service alone (its JVM ignores it, as PySpark starts it): a clean stop."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(120)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to the service and its JVM: a crash."""
        if self.process.poll() is None or _group_alive(self.process.pid):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(60)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def client(work: Path, remote: str, script: str, name: str, wait: bool = True,
           store: str | None = None) -> subprocess.Popen:
    """A notebook-like process running `script`; on the test's store unless `store` names another
    ('-': none, the Gateway finds it)."""
    path = work / f"{name}.py"
    path.write_text(textwrap.dedent(script))
    process = subprocess.Popen([sys.executable, str(TESTS / "service_client.py"),
                                store or str(work / "store" / "catalog.json"),
                                remote, str(path), str(work / f"{name}-warehouse")],
                               stdout=subprocess.PIPE, stderr=open(work / f"{name}.log", "w"), text=True,
                               env=_env(), cwd=work, start_new_session=True)
    if wait:
        assert process.wait(300) == 0, (work / f"{name}.log").read_text()
    return process


def scheduled(store: Path, table: str, pid: int | None = None) -> list[dict]:
    return [e for e in RefreshHistory(str(store)).entries(f"spark_catalog.default.{table}")
            if e["trigger"] == "scheduled" and (pid is None or e["runner"]["pid"] == pid)]


@pytest.mark.processes
def test_the_service_keeps_tables_fresh_for_its_clients(tmp_path):
    service = Service(tmp_path, "service")
    try:
        client(tmp_path, service.url, CREATE_TABLES + textwrap.dedent("""
            assert gw.owner()["kind"] == "service" and not gw.owner()["this_gateway"], gw.owner()
        """), "creator")
        # the creator has exited: the service refreshes on its schedule
        wait_for(lambda: len(scheduled(service.store, "counts", service.process.pid)) >= 2, timeout=60)

        idle = client(tmp_path, service.url, "time.sleep(20)", "idle", wait=False)
        busy = client(tmp_path, service.url, """
            start = time.monotonic()
            spark.sql("INSERT INTO events VALUES (3)")
            deadline = time.monotonic() + 60
            while spark.table("copy").count() != 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sorted(r.id for r in spark.table("copy").collect()) == [1, 2, 3]
            gw.execute("ALTER MATERIALIZED TABLE copy SUSPEND")
            record = gw.store.get("spark_catalog.default.copy")
            assert record.refresh_status == "SUSPENDED" and record.job.restore_path, record
            spark.sql("INSERT INTO events VALUES (4)")
            gw.execute("ALTER MATERIALIZED TABLE copy RESUME")
            while spark.table("copy").count() != 4 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sorted(r.id for r in spark.table("copy").collect()) == [1, 2, 3, 4]
            gw.execute("ALTER MATERIALIZED TABLE counts AS SELECT COUNT(*) AS n, MAX(id) AS top FROM events")
            time.sleep(max(0.0, 20 - (time.monotonic() - start)))      # two clients for 20 s
        """, "busy", wait=False)
        for process in (idle, busy):
            assert process.wait(300) == 0, (tmp_path / "busy.log").read_text()
        fires = [e["schedule_time"] for e in scheduled(service.store, "counts")]
        assert len(fires) >= 5 and len(fires) == len(set(fires))          # every fire once, in the service
        assert {e["runner"]["pid"] for e in scheduled(service.store, "counts")} == {service.process.pid}

        client(tmp_path, service.url, """
            gw.execute("DROP MATERIALIZED TABLE copy")
            say(gw.store.get("spark_catalog.default.copy"))
        """, "dropper")
        status = subprocess.run([sys.executable, "-m", "mt_magic", "status", "--store", str(service.store)],
                                capture_output=True, text=True, env=_env(), check=True).stdout
        assert f"service pid {service.process.pid}" in status and "alive" in status
        assert "spark_catalog.default.counts  FULL  ACTIVATED" in status and "copy" not in status
    finally:
        assert service.stop() == 0, service.log.read_text()
    assert "Stopped" in service.log.read_text()
    assert Lease(str(service.store)).holder() is None                 # released on the way out


@pytest.mark.processes
def test_a_second_service_on_a_served_store_is_refused(tmp_path):
    service = Service(tmp_path, "service")
    try:
        second = subprocess.run([sys.executable, "-m", "mt_magic", "serve", "--store", str(service.store)],
                                capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
        assert second.returncode == 2
        assert f"owned by a running service pid {service.process.pid}" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        service.stop()


@pytest.mark.processes
def test_a_new_service_after_a_sigkill_goes_on(tmp_path):
    first = Service(tmp_path, "first")
    try:
        client(tmp_path, first.url, CREATE_TABLES + textwrap.dedent("""
            spark.sql("INSERT INTO events VALUES (3)")
            while spark.table("copy").count() != 3:
                time.sleep(0.2)
        """), "before")
    finally:
        first.kill()
    second = Service(tmp_path, "second")
    try:
        assert Lease(str(second.store)).owner().pid == second.process.pid
        client(tmp_path, second.url, """
            spark.sql("INSERT INTO events VALUES (4), (5)")
            deadline = time.monotonic() + 90
            while spark.table("copy").count() < 5 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3)     # a duplicate would show up by now
            assert sorted(r.id for r in spark.table("copy").collect()) == [1, 2, 3, 4, 5]
        """, "after")
        wait_for(lambda: scheduled(second.store, "counts", second.process.pid), timeout=60)
        assert CatalogStore(str(second.store)).get("spark_catalog.default.copy").refresh_status == "ACTIVATED"
    finally:
        second.stop()


class Lines:
    """A process's printed lines, each awaited with a timeout."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(line) for line in process.stdout], daemon=True).start()

    def next(self, timeout: float) -> list[str]:
        return self._lines.get(timeout=timeout).split()


@pytest.mark.processes
def test_a_kernel_takes_over_from_a_killed_kernel_and_follows_publishes(tmp_path):
    """Two kernels with their own sessions (two Spark applications) on one store and one folder of data."""
    source = tmp_path / "src"
    register = f"spark.sql(\"CREATE TABLE IF NOT EXISTS src (id INT) USING parquet LOCATION '{source}'\")\n"
    spark_write = f"spark.range({{n}}).selectExpr('CAST(id AS INT) AS id').write.mode('append').parquet('{source}')\n"
    owner = client(tmp_path, "local", register + spark_write.format(n=2) + """
gw.execute("CREATE MATERIALIZED TABLE counts FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = FULL "
           "AS SELECT COUNT(*) AS n FROM src")
say("owner", gw.owner()["this_gateway"])
time.sleep(4)
spark.sql("INSERT INTO src VALUES (7), (8), (9)")
time.sleep(600)
""", "kernel1", wait=False)
    assert Lines(owner).next(180) == ["owner", "True"]
    follower = client(tmp_path, "local", register + """
say("client", gw.owner()["this_gateway"])
deadline = time.monotonic() + 60
while time.monotonic() < deadline and spark.table("counts").first().n != 5:
    time.sleep(0.2)
say("followed", spark.table("counts").first().n)
while not (gw.owner() or {}).get("this_gateway"):
    time.sleep(0.2)
say("owner")
while not [e for e in gw.history("counts") if e["trigger"] == "scheduled" and e["runner"]["pid"] == __import__("os").getpid()]:
    time.sleep(0.2)
say("refreshed")
""", "kernel2", wait=False)
    lines = Lines(follower)
    try:
        assert lines.next(180) == ["client", "False"]
        assert lines.next(90) == ["followed", "5"]         # the owner's publish, seen in this application
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait(60)
        assert lines.next(30) == ["owner"]                 # taken over within 30 s
        assert lines.next(60) == ["refreshed"]
    finally:
        for process in (owner, follower):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(60)


@pytest.mark.processes
def test_on_a_standalone_cluster(tmp_path):
    """A Spark standalone master and worker from the pyspark wheel; the service drives the cluster."""
    spark_class = Path(__import__("pyspark").__file__).parent / "bin" / "spark-class"
    port = _free_port()
    daemons = [subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                 "--port", str(port), "--webui-port", str(_free_port())],
                                stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT, env=_env(),
                                start_new_session=True)]
    try:
        wait_for(lambda: "I have been elected leader" in (tmp_path / "master.log").read_text(), timeout=120)
        daemons.append(subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
             "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()),
             "--work-dir", str(tmp_path / "worker")],
            stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT, env=_env(), start_new_session=True))
        wait_for(lambda: "Successfully registered with master" in (tmp_path / "worker.log").read_text(), timeout=120)
        service = Service(tmp_path, "service", master=f"spark://127.0.0.1:{port}")
        try:
            client(tmp_path, service.url, CREATE_TABLES + textwrap.dedent("""
                assert spark.conf.get("spark.master").startswith("spark://")
                spark.sql("INSERT INTO events VALUES (3)")
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and (spark.table("counts").first().n, spark.table("copy").count()) != (3, 3):
                    time.sleep(0.2)
                assert spark.table("counts").first().n == 3
                assert sorted(r.id for r in spark.table("copy").collect()) == [1, 2, 3]
            """), "cluster-client")
            assert scheduled(service.store, "counts", service.process.pid)
            assert "app-" in Lease(str(service.store)).owner().application_id       # a cluster application
        finally:
            assert service.stop() == 0, service.log.read_text()
    finally:
        for daemon in reversed(daemons):
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(60)


def test_a_kernel_that_owns_the_store_hands_it_to_a_service(spark, store_path, tmp_path):
    kernel = Gateway(spark, catalog_store=store_path)
    try:
        kernel.execute("CREATE MATERIALIZED TABLE ticks FRESHNESS = INTERVAL '2' SECOND REFRESH_MODE = FULL "
                       "AS SELECT 1 AS one")
        identifier = kernel.describe("ticks")["identifier"]
        service = Service(tmp_path, "service", store=Path(store_path))
        try:
            assert kernel.owner()["kind"] == "service" and not kernel.owner()["this_gateway"]
            assert not kernel.pipelines.scheduler.has(identifier)                 # stopped here ...
            wait_for(lambda: [e for e in kernel.history("ticks") if e["trigger"] == "scheduled"
                              and e["runner"]["pid"] == service.process.pid], timeout=60)   # ... runs there
            kernel.execute("ALTER MATERIALIZED TABLE ticks SUSPEND")              # sent to the service
            assert kernel.describe("ticks")["refresh_status"] == "SUSPENDED"
        finally:
            assert service.stop() == 0, service.log.read_text()
    finally:
        kernel.close()


def plain_client(work: Path, url: str, store: Path, script: str, name: str) -> str:
    """A script as a user writes it: PySpark's own builder, then a Gateway on the service's store."""
    path = work / f"{name}.py"
    path.write_text("import time\nfrom pyspark.sql import SparkSession\nfrom mt_magic import Gateway\n"
                    f"spark = SparkSession.builder.remote({url!r}).getOrCreate()\n"
                    f"gw = Gateway(spark, catalog_store={str(store)!r})\n"
                    + textwrap.dedent(script) + "\ngw.close()\n")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=_env(), cwd=work,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _errors(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " ERROR " in line or '"level": "ERROR"' in line]


def _foreign(log: Path) -> list[str]:
    """Lines of the service's log that are not its own (Spark's go to Spark's log)."""
    return [line for line in log.read_text().splitlines()
            if not re.match(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} (INFO|WARNING) ", line)]


@pytest.mark.processes
def test_a_service_on_the_default_catalog_keeps_its_clients_sources_across_a_restart(tmp_path):
    """`mt-magic serve --store S --connect-port P --conf spark.sql.warehouse.dir=W`, no Hive: a client
    creates a source and tables over it; after a restart the service registers the source again (the
    in-memory catalog forgot it) and refreshes on; a source really gone suspends its tables once. The
    service's log holds its own lines only: a refresh whose tasks fail (a user's assert_true) is one
    line there, its task errors and Java stacks are in Spark's log."""
    service = Service(tmp_path, "first", hive=False)
    plain_client(tmp_path, service.url, service.store, """
        spark.sql("CREATE TABLE checks (v DOUBLE) USING parquet")
        spark.sql("INSERT INTO checks VALUES (1.0)")
        gw.execute("CREATE MATERIALIZED TABLE checked FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL "
                   "AS SELECT assert_true(v < 10, 'too big') AS ok FROM checks")
        spark.sql("INSERT INTO checks VALUES (100.0)")
        spark.sql("CREATE TABLE visits (k INT, v DOUBLE) USING parquet")
        assert sorted(t.name for t in spark.catalog.listTables()) == ["checked", "checks", "visits"]
        spark.sql("INSERT INTO visits VALUES (1, 1.0), (2, 2.0)")
        for name in ("per_k", "total"):
            gw.execute(f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL "
                       "AS SELECT k, SUM(v) AS s FROM visits GROUP BY k" if name == "per_k" else
                       f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '5' SECOND REFRESH_MODE = FULL "
                       "AS SELECT SUM(v) AS s FROM visits")
    """, "creator")
    wait_for(lambda: any(e["outcome"] == "FAILED" and "too big" in e["error"] for e in
                         RefreshHistory(str(service.store)).entries("spark_catalog.default.checked")), timeout=60)
    assert service.stop() == 0, service.log.read_text()
    assert _errors(service.log) == [] and _foreign(service.log) == []
    second = Service(tmp_path, "second", hive=False)
    try:
        assert "Registered again the 2 tables" in second.log.read_text()
        plain_client(tmp_path, second.url, second.store, """
            spark.sql("INSERT INTO visits VALUES (1, 5.0)")
            deadline = time.monotonic() + 60
            while spark.table("total").first().s != 8.0 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert spark.table("total").first().s == 8.0
            spark.sql("DROP TABLE visits")
        """, "after")
        store = CatalogStore(str(second.store))
        for name in ("per_k", "total"):
            table = wait_for(lambda: (lambda t: t if t.refresh_status == "SUSPENDED" else None)(
                store.get(f"spark_catalog.default.{name}")), timeout=60)
            assert "source spark_catalog.default.visits does not exist" in table.suspend_reason
        time.sleep(6)               # a fire's time: nothing retries a suspended table
        failed = [e for e in RefreshHistory(str(second.store)).entries() if e["outcome"] == "FAILED"
                  and e["table"] != "spark_catalog.default.checked"]
        assert sorted(e["table"] for e in failed) == ["spark_catalog.default.per_k", "spark_catalog.default.total"]
        assert _errors(second.log) == []
    finally:
        assert second.stop() == 0, second.log.read_text()


@pytest.mark.processes
def test_two_stores_in_one_folder_have_an_owner_each(tmp_path):
    stores = tmp_path / "stores"
    services = {name: Service(tmp_path, name, store=stores / f"{name}.json", hive=False) for name in ("dev", "prod")}
    try:
        for name, service in services.items():
            plain_client(tmp_path, service.url, service.store, f"""
                spark.sql("CREATE TABLE src_{name} (k INT) USING parquet")
                spark.sql("INSERT INTO src_{name} VALUES (1)")
                gw.execute("CREATE MATERIALIZED TABLE {name}_t FRESHNESS = INTERVAL '5' SECOND "
                           "REFRESH_MODE = FULL AS SELECT COUNT(*) AS n FROM src_{name}")
                assert [r[0] for r in gw.execute("SHOW MATERIALIZED TABLES")[-1].rows] == ["{name}_t"]
                assert gw.owner()["pid"] == {service.process.pid}, gw.owner()
            """, f"client-{name}")
        for name, service in services.items():
            assert Lease(str(service.store)).owner().pid == service.process.pid
            assert [t.name for t in CatalogStore(str(service.store)).list()] == [f"{name}_t"]
            wait_for(lambda: scheduled(service.store, f"{name}_t", service.process.pid), timeout=60)
    finally:
        for service in services.values():
            assert service.stop() == 0, service.log.read_text()
