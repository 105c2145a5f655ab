"""EXPLAIN says what a refresh would do; the refresh then does exactly that. One decision, made by one
function, for shapes × source changes × policies × triggers — the run's history entry read back in
EXPLAIN's words."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from mt_magic.catalog.history import Technique
from mt_magic.refresh.decision import phrase

TABLES = {   # name → (WITH options, PARTITIONED BY, query)
    "filtered": ("", "", "SELECT day, k, v FROM facts WHERE v > 0"),
    "summed": ("", "", "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "summed_incremental": ("'refresh.policy' = 'incremental'", "",
                           "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "summed_full": ("'refresh.policy' = 'full'", "", "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM facts GROUP BY k"),
    "daily": ("", "PARTITIONED BY (day) ", "SELECT day, SUM(v) AS s FROM facts GROUP BY day"),
}
CHANGES = {
    "nothing": None,
    "an append": "INSERT INTO facts VALUES (1, 5.0, 'd1'), (4, -1.0, 'd3')",
    "a day rewritten": "INSERT OVERWRITE facts PARTITION (day = 'd2') VALUES (2, 7.0), (5, 1.0)",
    "all rewritten": "INSERT OVERWRITE facts SELECT CAST(id % 4 AS INT), CAST(id AS DOUBLE) - 3, "
                     "concat('d', CAST(id % 3 AS STRING)) FROM range(12)",
}


def test_what_explain_says_a_refresh_would_do_is_what_it_does(spark, gw):
    spark.sql("CREATE TABLE facts (k INT, v DOUBLE, day STRING) USING parquet PARTITIONED BY (day)")
    spark.sql("INSERT INTO facts VALUES (1, 1.0, 'd1'), (2, 2.0, 'd2'), (3, -1.0, 'd2')")
    for name, (options, partitioned, query) in TABLES.items():
        with_ = f"WITH ({options}) " if options else ""
        gw.execute(f"CREATE MATERIALIZED TABLE {name} {partitioned}{with_}FRESHNESS = INTERVAL '1' DAY "
                   f"REFRESH_MODE = FULL AS {query}")
    fires = itertools.count(1)
    seen = set()
    for (change, statement), trigger in itertools.product(CHANGES.items(), ("a scheduled refresh now", "this REFRESH")):
        if statement:
            spark.sql(statement)
        for name, (_, _, query) in TABLES.items():
            said = dict(gw.execute(f"EXPLAIN ALTER MATERIALIZED TABLE {name} REFRESH")[0].rows)[trigger]
            if trigger == "this REFRESH":
                gw.refresh(name)
            else:
                gw.refresh(name, schedule_time=(datetime(2030, 1, 1) + timedelta(days=next(fires))).strftime(
                    "%Y-%m-%d %H:%M:%S"))
            done = gw.history(name, limit=1)[0]
            how = gw.describe(name)["technique"]
            assert said == f"would {phrase(Technique(done['technique']), done['partitions'], done['reason'], how)}", \
                (name, change, trigger, done)
            assert _rows(spark.table(name)) == _rows(spark.sql(query)), (name, change, trigger)
            seen.add(done["technique"])
    assert seen == {str(t) for t in Technique} - {"stream"}, seen     # every technique was decided and run


def _rows(frame) -> list:
    return sorted(tuple(sorted(row.asDict().items())) for row in frame.collect())
