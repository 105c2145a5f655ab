"""A new Gateway on an existing catalog store: what a restarted kernel sees."""

from __future__ import annotations

import os

import pytest

from helpers import table_rows, published_partitions
from mt_magic import Gateway, ValidationError
from mt_magic.catalog.model import INITIALIZING
from mt_magic.storage.versions import TableStorage
from mt_magic.storage.writers import WRITER_NOTE, note_of


def forget_spark_tables(spark, db):
    """What a new kernel's in-memory Spark catalog looks like: the tables are gone, the data is not."""
    for table in spark.catalog.listTables(db):
        if table.name != "sales" and not table.isTemporary:
            spark.sql(f"DROP TABLE {db}.{table.name}")


def test_restart_keeps_data_statuses_and_schedules(spark, db, sales, store_path):
    first = Gateway(spark, catalog_store=store_path)
    first.execute("""CREATE MATERIALIZED TABLE daily PARTITIONED BY (ds)
        WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd') FRESHNESS = INTERVAL '1' HOUR
        AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id""")
    first.execute("CREATE MATERIALIZED TABLE paused REFRESH_MODE = FULL AS SELECT * FROM sales")
    first.execute("ALTER MATERIALIZED TABLE paused SUSPEND")
    daily_rows, paused_rows = table_rows(spark, "daily"), table_rows(spark, "paused")
    first.close()
    forget_spark_tables(spark, db)
    assert not spark.catalog.tableExists("daily")

    second = Gateway(spark, catalog_store=store_path)
    try:
        assert second.restore_warnings == []
        assert table_rows(spark, "daily") == daily_rows and table_rows(spark, "paused") == paused_rows
        assert published_partitions(spark, "daily") == ["ds=2024-01-01",
                                                                                       "ds=2024-01-02"]
        daily, paused = second.describe("daily"), second.describe("paused")
        assert daily["refresh_status"] == "ACTIVATED" and daily["next_refresh"] is not None
        assert paused["refresh_status"] == "SUSPENDED" and paused["next_refresh"] is None
        spark.sql("INSERT INTO sales VALUES ('2024-01-02', 9, 9.0)")
        second.refresh("daily", schedule_time="2024-01-03 00:00:00")
        assert (9, 9.0, "2024-01-02") in table_rows(spark, "daily")
        second.execute("ALTER MATERIALIZED TABLE paused RESUME")
        assert second.describe("paused")["next_refresh"] is not None
    finally:
        second.close()


def thirty_one_tables(spark, store_path):
    """t00 … t29 (never refreshed) and zz, created last; zz's rows."""
    first = Gateway(spark, catalog_store=store_path, config={"materialized-table.full.initialize": "on-schedule"})
    for n in range(30):
        first.execute(f"CREATE MATERIALIZED TABLE t{n:02} REFRESH_MODE = FULL AS SELECT * FROM sales")
    first.execute("SET 'materialized-table.full.initialize' = 'on-create'")
    first.execute("CREATE MATERIALIZED TABLE zz REFRESH_MODE = FULL AS "
                  "SELECT product_id, COUNT(*) AS n FROM sales GROUP BY product_id")
    expected = table_rows(spark, "zz")
    first.close()
    return expected


def test_a_statement_right_after_opening_waits_for_its_table_alone(spark, db, sales, store_path):
    """A new owner returns before its tables are back in Spark; a statement on one of them (a plain
    query, an ALTER) waits for that table, and the rest follow in the background."""
    expected = thirty_one_tables(spark, store_path)
    forget_spark_tables(spark, db)

    second = Gateway(spark, catalog_store=store_path, config={"materialized-table.open.wait": "0 ms"})
    try:
        (result,) = second.execute("SELECT product_id, n FROM zz")       # the last to be put back
        assert {tuple(r) for r in result.rows} == expected
        second.execute("ALTER MATERIALIZED TABLE t29 SUSPEND")
        assert second.restored(120) and second.restore_warnings == []
        assert {t.name for t in spark.catalog.listTables(db)} >= {f"t{n:02}" for n in range(30)} | {"zz"}
        assert second.describe("t29")["refresh_status"] == "SUSPENDED"
    finally:
        second.close()


def test_a_client_whose_catalog_lacks_the_tables_opens_at_once_and_puts_them_back_behind(
        spark, db, sales, store_path):
    """A client's Spark catalog without the store's tables (a new kernel while a service owns the
    store): opening returns before they are back, a query waits for its table, and a table the owner
    drops meanwhile is not put back by the batch that was restoring it."""
    expected = thirty_one_tables(spark, store_path)
    owner = Gateway(spark, catalog_store=store_path)
    assert owner.restored(120)
    forget_spark_tables(spark, db)

    client = Gateway(spark, catalog_store=store_path, config={"materialized-table.open.wait": "0 ms"})
    try:
        assert not client.owner()["this_gateway"] and not client.restored(0)
        (result,) = client.execute("SELECT product_id, n FROM zz")
        assert {tuple(r) for r in result.rows} == expected
        client.execute("DROP MATERIALIZED TABLE t28")
        assert client.restored(120) and client.restore_warnings == []
        names = {t.name for t in spark.catalog.listTables(db)}
        assert names >= {f"t{n:02}" for n in range(28)} | {"t29", "zz"} and "t28" not in names
    finally:
        client.close()
        owner.close()


def test_a_table_a_client_could_not_put_back_is_tried_again_at_the_next_change(spark, db, sales, store_path):
    """A name the client's catalog uses for something else (here a view) fails that table alone; once
    the name is free, the next change of the store puts it back."""
    thirty_one_tables(spark, store_path)
    owner = Gateway(spark, catalog_store=store_path)
    assert owner.restored(120)
    forget_spark_tables(spark, db)
    spark.sql("CREATE VIEW t05 AS SELECT 1 AS x")
    client = Gateway(spark, catalog_store=store_path)
    try:
        assert client.restored(120)
        assert [w.split(":")[0] for w in client.restore_warnings] == [f"spark_catalog.{db}.t05"]
        spark.sql("DROP VIEW t05")
        client.execute("ALTER MATERIALIZED TABLE t06 SUSPEND")        # any change of the store
        assert spark.table("t05").columns == ["ds", "product_id", "amount"]
    finally:
        client.close()
        owner.close()


def test_restart_rolls_back_a_create_left_initializing(spark, db, sales, store_path):
    first = Gateway(spark, catalog_store=store_path)
    first.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    identifier = first.describe("t")["identifier"]
    root = first.store.get(identifier).storage.root.removeprefix("file:")
    first.close()
    first.store.update(identifier, lambda t: t.evolve(refresh_status=INITIALIZING))   # a crash mid-CREATE
    forget_spark_tables(spark, db)

    second = Gateway(spark, catalog_store=store_path)
    try:
        assert second.store.get(identifier) is None
        assert not os.path.exists(root) and not spark.catalog.tableExists("t")
        assert any("rolled back" in w for w in second.restore_warnings)
        second.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    finally:
        second.close()


def test_superseded_versions_are_deleted_after_the_retention(spark, db, sales, store_path):
    gateway = Gateway(spark, catalog_store=store_path,
                      config={"materialized-table.storage.version-retention": "0 s"})
    try:
        gateway.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
        root = gateway.store.get(gateway.describe("t")["identifier"]).storage.root.removeprefix("file:")
        for _ in range(3):
            gateway.execute("ALTER MATERIALIZED TABLE t REFRESH")
        versions = [n for n in os.listdir(root) if n.startswith("v-")]
        # the published one, plus the one superseded last (marked now, deleted by the next sweep)
        assert len(versions) == 2
        assert spark.table("t").count() == 4
    finally:
        gateway.close()


def test_only_the_owner_sweeps_and_never_a_write_in_flight(spark, db, sales, store_path):
    config = {"materialized-table.storage.version-retention": "0 s"}
    owner = Gateway(spark, catalog_store=store_path, config=config)
    client = Gateway(spark, catalog_store=store_path, config=config)
    try:
        owner.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
        root = owner.store.get(owner.describe("t")["identifier"]).storage.root.removeprefix("file:")
        in_flight = os.path.join(root, "v-99990101T000000000000-inflight")
        os.makedirs(os.path.join(in_flight, "_temporary", "0"))
        # A live process notes that it writes there (as every refresh does beside its version).
        open(note_of(in_flight), "w").close()

        def versions() -> list[str]:
            return sorted(n for n in os.listdir(root) if n.startswith("v-") and WRITER_NOTE not in n)
        for _ in range(3):
            client.execute("ALTER MATERIALIZED TABLE t REFRESH")         # runs in the client's session
        assert len(versions()) == 5                                       # a client sweeps nothing
        for _ in range(2):
            owner.execute("ALTER MATERIALIZED TABLE t REFRESH")
        assert versions()[-1] == os.path.basename(in_flight)
        assert len(versions()) == 3                 # published, last superseded, in flight
    finally:
        client.close()
        owner.close()


def test_spark_left_on_an_unrecorded_version_is_put_back_and_that_version_outlives_the_sweep(
        spark, db, sales, store_path):
    """A kill between a publish and its record leaves a persistent catalog (Hive; here, this
    session's) on a version the store does not name: the sweep never deletes what Spark reads, and
    the next owner puts Spark back on the store's version."""
    first = Gateway(spark, catalog_store=store_path)
    first.execute("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales")
    spark.sql("INSERT INTO sales VALUES ('2024-01-09', 9, 9.0)")
    first.execute("ALTER MATERIALIZED TABLE t REFRESH")
    record = first.store.get(first.describe("t")["identifier"])
    first.close()
    root = record.storage.root.removeprefix("file:")
    (older,) = [os.path.join(root, n) for n in os.listdir(root)
                if n.startswith("v-") and not record.storage.location.endswith(n)]
    spark.sql(f"ALTER TABLE t SET LOCATION 'file:{older}'")
    storage = TableStorage(spark)
    for _ in range(2):                                   # marks it, then would delete it
        storage.sweep(record, 0.0)
    assert os.path.isdir(older) and spark.table("t").count() == 4

    second = Gateway(spark, catalog_store=store_path)
    try:
        assert second.restored(120)          # (opening returns before the tables are put back: `restored`)
        assert spark.table("t").count() == 5
        assert table_rows(spark, "t") == table_rows(spark, "sales")
    finally:
        second.close()


def test_two_stores_in_one_folder_are_two_stores(spark, db, sales, tmp_path):
    """stores/dev.json and stores/prod.json, opened one after the other in one session: neither lists,
    drops nor reopens with the other's tables."""
    dev_path, prod_path = str(tmp_path / "stores" / "dev.json"), str(tmp_path / "stores" / "prod.json")
    dev = Gateway(spark, catalog_store=dev_path)
    dev.execute("CREATE MATERIALIZED TABLE dev_t REFRESH_MODE = FULL AS SELECT * FROM sales")
    dev.close()
    prod = Gateway(spark, catalog_store=prod_path)
    try:
        prod.execute("CREATE MATERIALIZED TABLE prod_t REFRESH_MODE = FULL AS SELECT * FROM sales")
        assert [row[0] for row in prod.execute("SHOW MATERIALIZED TABLES")[-1].rows] == ["prod_t"]
        with pytest.raises(ValidationError, match="dev_t is not a materialized table"):
            prod.execute("DROP MATERIALIZED TABLE dev_t")
    finally:
        prod.close()
    dev = Gateway(spark, catalog_store=dev_path)
    try:
        assert [row[0] for row in dev.execute("SHOW MATERIALIZED TABLES")[-1].rows] == ["dev_t"]
        assert dev.restore_warnings == [] and table_rows(spark, "dev_t") == table_rows(spark, "sales")
    finally:
        dev.close()
