"""A seeded fuzzer: mutated statements fail only with a clean MaterializedTableError, never with
Python's or Spark's bridge errors, and a failed statement leaves the catalog store as it was."""

from __future__ import annotations

import random
import re

from mt_magic import MaterializedTableError, parse

SEEDS = [
    "CREATE MATERIALIZED TABLE f (PRIMARY KEY (ds) NOT ENFORCED) COMMENT 'c' PARTITIONED BY (ds) "
    "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd') FRESHNESS = INTERVAL '1' HOUR "
    "REFRESH_MODE = FULL AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds",
    "CREATE OR ALTER MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR AS SELECT ds, amount FROM sales",
    "ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = '2024-01-01')",
    "ALTER MATERIALIZED TABLE t SET FRESHNESS = INTERVAL '2' HOUR",
    "ALTER MATERIALIZED TABLE t SET ('k' = 'v')",
    "ALTER MATERIALIZED TABLE t RESET ('k')",
    "ALTER MATERIALIZED TABLE t BACKFILL FROM '2024-01-01 00:00:00' TO '2024-01-01 02:00:00'",
    "EXPLAIN ALTER MATERIALIZED TABLE t REFRESH",
    "SHOW MATERIALIZED TABLES LIKE 't%'",
    "SHOW CREATE MATERIALIZED TABLE t",
    "DESCRIBE EXTENDED t",
    "SET 'materialized-table.refresh.retries' = '1'",
]
VOCABULARY = ["'", "`", '"', "(", ")", ",", ";", "=", "/*", "*/", "--", "\\", "²", "\ud800", "99999999999999999999",
              "0", "-1", "NULL", "INTERVAL", "SECOND", "DAY", "AS", "SELECT", "FROM", "PARTITION", "TABLE",
              "MATERIALIZED", "WITH", "FRESHNESS", "REFRESH_MODE", "CONTINUOUS", "FULL", "t", "sales",
              "'x'", "`a b`", "..", "/", "PRIMARY KEY", "NOT NULL", "WATERMARK FOR", "R'\\'"]
_PIECES = re.compile(r"'(?:[^'\\]|\\.)*'|`[^`]*`|\w+|\S")
BRIDGE = re.compile(r"py4j|An error occurred while calling|Traceback|java\.|at org\.apache")


def mutations(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        pieces = _PIECES.findall(rng.choice(SEEDS))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(pieces))
            operation = rng.choice(("delete", "insert", "replace", "duplicate"))
            if operation == "delete" and len(pieces) > 1:
                del pieces[at]
            elif operation == "insert":
                pieces.insert(at, rng.choice(VOCABULARY))
            elif operation == "replace":
                pieces[at] = rng.choice(VOCABULARY)
            else:
                pieces.insert(at, pieces[at])
        yield " ".join(pieces)


def test_parsing_thousands_of_mutations_raises_only_parse_and_validation_errors():
    for text in mutations(seed=20261123, count=4000):
        try:
            parse(text)
        except MaterializedTableError as error:
            assert not BRIDGE.search(str(error)), (text, str(error))


def test_mutated_statements_fail_cleanly_and_change_nothing(spark, gw, sales):
    gw.execute("CREATE MATERIALIZED TABLE t PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' HOUR "
               "REFRESH_MODE = FULL AS SELECT ds, amount FROM sales")
    for text in mutations(seed=7, count=150):
        for dry_run in (True, False):
            before = definitions(gw)
            try:
                gw.execute(text, dry_run=dry_run)
            except MaterializedTableError as error:
                assert not BRIDGE.search(str(error)), (text, str(error))
                assert definitions(gw) == before, text


def definitions(gw) -> list[dict]:
    """The store's records without what a failed refresh rightly records (its outcome)."""
    recorded = ("last_refresh", "updated_at", "consecutive_failures")
    return [{k: v for k, v in t.to_document().items() if k not in recorded} for t in gw.store.list()]
