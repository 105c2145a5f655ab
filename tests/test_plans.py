"""--dry-run and execute share one plan step: they accept and refuse exactly the same statements."""

from __future__ import annotations

import pytest

from mt_magic import MaterializedTableError

DAILY = """CREATE MATERIALIZED TABLE daily
    PARTITIONED BY (ds)
    WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
    FRESHNESS = INTERVAL '1' DAY
    REFRESH_MODE = FULL
    AS SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id"""
QUERY = "SELECT ds, product_id, SUM(amount) AS total FROM sales GROUP BY ds, product_id"

VALID = [
    "CREATE MATERIALIZED TABLE other AS SELECT * FROM sales",
    f"CREATE OR ALTER MATERIALIZED TABLE daily PARTITIONED BY (ds) FRESHNESS = INTERVAL '2' HOUR "
    f"REFRESH_MODE = FULL AS {QUERY}",
    "ALTER MATERIALIZED TABLE daily SUSPEND",
    "ALTER MATERIALIZED TABLE daily REFRESH PARTITION (ds = '2024-01-01')",
    "ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '2' HOUR",
    "ALTER MATERIALIZED TABLE daily SET REFRESH_MODE = FULL",
    "ALTER MATERIALIZED TABLE daily SET REFRESH_MODE = CONTINUOUS",
    "ALTER MATERIALIZED TABLE daily SET ('compression' = 'gzip')",
    "ALTER MATERIALIZED TABLE daily RESET ('compression')",
    "ALTER MATERIALIZED TABLE daily AS SELECT ds, product_id, SUM(amount) AS total, COUNT(*) AS n "
    "FROM sales GROUP BY ds, product_id",
    "DROP MATERIALIZED TABLE daily",
    "DROP MATERIALIZED TABLE IF EXISTS nope",
    "CREATE TABLE copy AS SELECT * FROM sales",
    "SHOW MATERIALIZED TABLES",
    "SHOW CREATE MATERIALIZED TABLE daily",
    "DESCRIBE daily",
    "SET 'materialized-table.storage.version-retention' = '5 min'",
    "SET 'spark.sql.shuffle.partitions' = '3'",
    "RESET",
    "SELECT * FROM sales",
]

INVALID = [
    "ALTER MATERIALIZED TABLE daily SET FRESHNESS = INTERVAL '7' MINUTE",   # FULL: not a cron step
    f"CREATE OR ALTER MATERIALIZED TABLE daily PARTITIONED BY (product_id) AS {QUERY}",
    f"CREATE OR ALTER MATERIALIZED TABLE daily PARTITIONED BY (ds) REFRESH_MODE = CONTINUOUS AS {QUERY}",
    "ALTER MATERIALIZED TABLE daily RESUME",
    "ALTER MATERIALIZED TABLE daily REFRESH PARTITION (x = '1')",
    "ALTER MATERIALIZED TABLE daily AS SELECT ds FROM sales",
    "ALTER MATERIALIZED TABLE daily SET ('format' = 'csv')",
    "ALTER MATERIALIZED TABLE daily RESET ('path')",
    f"CREATE MATERIALIZED TABLE daily AS {QUERY}",
    "CREATE MATERIALIZED TABLE other AS SELECT * FROM nope",
    "CREATE MATERIALIZED TABLE other FRESHNESS = INTERVAL '7' MINUTE REFRESH_MODE = FULL AS SELECT * FROM sales",
    "CREATE MATERIALIZED TABLE other WITH ('format' = 'nope') AS SELECT * FROM sales",
    "DROP MATERIALIZED TABLE nope",
    "DROP TABLE daily",
    "CREATE TABLE sales AS SELECT 1 AS a",
    "SET 'spark.sql.warehouse.dir' = '/elsewhere'",
    "SET 'materialized-table.storage.version-retention' = 'soon'",
    "SELECT * FROM nope",
    "SELECT FROM WHERE",
]


@pytest.fixture
def planned(gw, sales, tmp_path):
    gw.execute(f"SET 'execution.checkpointing.dir' = '{tmp_path}/checkpoints'")
    gw.execute(DAILY)
    return gw


def outcome(action) -> tuple[str, str] | None:
    try:
        action()
    except MaterializedTableError as error:
        return type(error).__name__, str(error).splitlines()[0]
    return None


@pytest.mark.parametrize("statement", VALID + INVALID)
def test_dry_run_and_execute_agree(planned, statement):
    before = planned.describe("daily")
    dry = outcome(lambda: planned.execute(statement, dry_run=True))
    after_dry = planned.describe("daily")
    assert {k: v for k, v in after_dry.items() if k != "next_refresh"} == \
        {k: v for k, v in before.items() if k != "next_refresh"}                      # changed nothing
    real = outcome(lambda: planned.execute(statement))
    assert dry == real
    assert (real is None) == (statement in VALID)
