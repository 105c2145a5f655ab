"""One owner per catalog store: the first Gateway owns it; others are clients that send the owner
their pipeline statements, and take over when it stops or dies."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from helpers import wait_for
from mt_magic import Gateway, MaterializedTableError, TableNotFoundError
from mt_magic.catalog.lease import Holder, Lease, OwnerKind

FULL = "CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' HOUR REFRESH_MODE = FULL AS SELECT ds, " \
       "SUM(amount) AS total FROM sales GROUP BY ds"


@pytest.fixture
def pair(spark, db, sales, store_path):
    owner = Gateway(spark, catalog_store=store_path)
    client = Gateway(spark, catalog_store=store_path)
    yield owner, client
    client.close()
    owner.close()


def test_the_first_gateway_owns_and_a_second_is_a_client(pair):
    owner, client = pair
    assert owner.owner()["this_gateway"] and owner.owner()["kind"] == "kernel"
    assert not client.owner()["this_gateway"] and client.owner()["pid"] == os.getpid()


def test_a_clients_statements_run_in_the_owner_and_return_after_it(pair, db):
    owner, client = pair
    identifier = f"spark_catalog.{db}.mt"
    assert "Created materialized table" in client.execute(FULL)[0].message
    assert owner.pipelines.scheduler.has(identifier) and not client.pipelines.scheduler.has(identifier)
    client.execute("ALTER MATERIALIZED TABLE mt SUSPEND")
    assert owner.describe("mt")["refresh_status"] == "SUSPENDED"
    assert owner.pipelines.scheduler.next_fire_time(identifier) is None        # paused in the owner
    client.execute("ALTER MATERIALIZED TABLE mt RESUME")
    assert owner.pipelines.scheduler.next_fire_time(identifier) is not None
    with pytest.raises(TableNotFoundError, match="nope does not exist"):
        client.execute("ALTER MATERIALIZED TABLE nope SUSPEND")
    assert [e["trigger"] for e in client.history("mt")] == ["initial"]
    assert client.describe("mt")["next_refresh"] == owner.describe("mt")["next_refresh"] is not None
    client.execute("DROP MATERIALIZED TABLE mt")
    assert not owner.pipelines.scheduler.has(identifier) and owner.store.get(identifier) is None


def test_a_clients_options_and_database_go_with_its_statement(spark, pair, db):
    owner, client = pair
    spark.sql("CREATE DATABASE IF NOT EXISTS ownership_other")
    client.execute("SET 'materialized-table.full.initialize' = 'on-schedule'")
    spark.catalog.setCurrentDatabase("default")            # the owner's statement names tables as here
    try:
        client.execute(FULL.replace("TABLE mt", "TABLE ownership_other.mt").replace("FROM sales", f"FROM {db}.sales"))
    finally:
        spark.catalog.setCurrentDatabase(db)
    assert client.history("ownership_other.mt") == []      # no initial refresh: the client's option held
    assert owner.store.get("spark_catalog.ownership_other.mt").refresh_status == "ACTIVATED"
    client.execute("DROP MATERIALIZED TABLE ownership_other.mt")


def test_a_client_takes_over_when_the_owner_closes(pair, db):
    owner, client = pair
    client.execute(FULL)
    owner.close()
    wait_for(lambda: client.owner() and client.owner()["this_gateway"], timeout=15)
    assert client.pipelines.scheduler.has(f"spark_catalog.{db}.mt")
    client.execute("ALTER MATERIALIZED TABLE mt SUSPEND")     # runs here now
    assert client.describe("mt")["refresh_status"] == "SUSPENDED"


def test_an_owner_that_never_answers_changes_nothing(spark, db, sales, store_path, tmp_path):
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    lease = Lease(store_path)
    holder = Holder("silent", OwnerKind.SERVICE, socket.gethostname(), silent.pid, "app-silent", time.time(), time.time())
    try:
        assert lease.acquire(holder) is None
        client = Gateway(spark, catalog_store=store_path, config={"materialized-table.client.timeout": "1 s"})
        try:
            with pytest.raises(MaterializedTableError, match=r"service pid \d+ .* did not take the statement "
                                                             r"within 1 s; nothing was changed"):
                client.execute(FULL)
            assert client.store.list() == [] and os.listdir(client._ownership.mailbox.folder) == []
        finally:
            client.close()
        assert lease.holder().token == "silent"        # a client never releases another's lease
    finally:
        silent.kill()
        silent.wait()


def test_a_new_owner_after_a_dead_one_runs_its_missed_fire_once(spark, db, sales, store_path):
    first = Gateway(spark, catalog_store=store_path)
    first.execute("CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL "
                  "AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    wait_for(lambda: any(e["trigger"] == "scheduled" for e in first.history("mt")), timeout=30)
    first._ownership.stop()       # silenced, lease left behind: as a SIGKILL leaves it
    first.pipelines.close()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lease = Lease(store_path)
    stale = lease.holder()
    with open(lease.path, "w", encoding="utf-8") as handle:
        json.dump({**vars(stale), "pid": dead.pid}, handle)
    time.sleep(1.1)                # at least one fire nobody ran
    second = Gateway(spark, catalog_store=store_path)
    try:
        assert second.owner()["this_gateway"]
        catch_up = wait_for(lambda: [e for e in second.history("mt") if e["trigger"] == "catch-up"], timeout=30)
        assert len(catch_up) == 1 and catch_up[0]["outcome"] in ("SUCCEEDED", "SKIPPED")
        scheduled = [e["schedule_time"] for e in second.history("mt") if e["schedule_time"]]
        assert len(scheduled) == len(set(scheduled))        # no fire ran twice
    finally:
        second.close()


def test_missed_fires_count_from_the_tables_creation_not_from_an_earlier_table_of_its_name(spark, db, sales,
                                                                                           store_path):
    gateway = Gateway(spark, catalog_store=store_path)
    create = ("CREATE MATERIALIZED TABLE mt FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = FULL "
              "AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    try:
        gateway.execute(create)
        wait_for(lambda: any(e["trigger"] == "scheduled" for e in gateway.history("mt")), timeout=30)
        gateway.execute("DROP MATERIALIZED TABLE mt")
        time.sleep(2.1)                # fires of nobody's: the name had no table
        gateway.execute(create)
        table = gateway.store.get(gateway.describe("mt")["identifier"])
        now = datetime.now(gateway.zone())
        created = datetime.fromisoformat(table.created_at).astimezone(gateway.zone()).replace(tzinfo=None)
        missed = gateway._takeover.missed_fires(table, now)
        assert all(datetime.strptime(f, "%Y-%m-%d %H:%M:%S") > created for f in missed), (created, missed)
    finally:
        gateway.close()


def test_a_file_that_is_not_a_store_is_refused_and_left_alone(spark, tmp_path):
    for name, text in (("notes.json", '{"title": "mine"}'), ("broken.json", "{not json")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(MaterializedTableError, match="left as it is"):
            Gateway(spark, catalog_store=str(path))
        assert path.read_text() == text


def test_two_gateways_refreshing_different_partitions_keep_both(spark, pair, db):
    owner, client = pair
    owner.execute("CREATE MATERIALIZED TABLE daily PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' DAY "
                  "REFRESH_MODE = FULL AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    for round_ in range(1, 4):
        spark.sql(f"INSERT INTO sales VALUES ('2024-01-01', 9, {round_}.0), ('2024-01-02', 9, {round_}.0)")
        threads = [threading.Thread(target=gateway.execute, args=(
            f"ALTER MATERIALIZED TABLE daily REFRESH PARTITION (ds = '{day}')",))
            for gateway, day in ((owner, "2024-01-01"), (client, "2024-01-02"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        expected = {r["ds"]: r["total"] for r in spark.sql("SELECT ds, SUM(amount) AS total FROM sales "
                                                          "GROUP BY ds").collect()}
        assert {r["ds"]: r["total"] for r in spark.table("daily").collect()} == expected, round_
