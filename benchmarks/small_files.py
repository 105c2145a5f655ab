"""Appends of many small files, as `benchmarks/incremental.py layouts soak` runs them.

layouts: a fact table partitioned by day (60 days) of a sixth of the rows, written by 8 tasks; each round
appends 1 % with `insertInto` from four tasks (240 small files across the day folders). Three FULL tables
per shape — 'refresh.policy' auto, incremental and full — over a filter, the same filter UNION ALL a
returns table, and an aggregate; each refreshed after every append (full first, then the other two in
turns, each after a garbage collection). Auto's figure is what a user pays over the rounds: its total
time ÷ the better technique's (target <= 1.1).

soak: a 4M-row fact table appended to 500 times by one small file (800 rows), a filter table and an
aggregate refreshed after each append ('auto'). The last ten refreshes against ten around the tenth
(medians; one sample of a sub-second refresh swings by half), target <= 1.3; then a reader's full scan
of each table against the same scan of a compacted copy (one file per task; the two in turn, after an
untimed scan of each), target <= 1.3.
"""

from __future__ import annotations

import gc
import statistics

from workload import REPEATS, last_run, timed

LAYOUT_QUERIES = {
    "filter": "SELECT id, amount, ds FROM sf WHERE amount > 99.5",
    "union_all": "SELECT id, amount, ds FROM sf WHERE amount > 99.5 UNION ALL SELECT id, amount, ds FROM sr",
    "aggregate": "SELECT k, COUNT(*) AS n, SUM(amount) AS s FROM sf GROUP BY k",
}
LAYOUT_ROUNDS = 6
POLICIES = ("full", "incremental", "auto")
SOAK_ROWS = 4_000_000
SOAK_APPENDS = 500
SOAK_QUERIES = {
    "soak_filter": "SELECT id, k, amount FROM soak WHERE amount > 90",
    "soak_group": "SELECT k, COUNT(*) AS n, SUM(amount) AS s FROM soak GROUP BY k",
}


def _rows(spark, start: int, rows: int, tasks: int):
    return spark.range(start, start + rows, 1, tasks).selectExpr(
        "id", "CAST(id % 1000 AS INT) AS k", "CAST((id * 7919) % 10000 AS DOUBLE) / 100 AS amount",
        "date_format(date_add(DATE'2024-01-01', CAST(id % 60 AS INT)), 'yyyy-MM-dd') AS ds")


def _refresh(spark, gateway, table: str) -> tuple[float, str]:
    spark._jvm.System.gc()
    gc.collect()
    took = timed(lambda: gateway.execute(f"ALTER MATERIALIZED TABLE {table} REFRESH"))
    return took, last_run(gateway, table)["technique"]


def layouts(spark, gateway, rows: int, equal) -> dict[str, list[dict[str, tuple[float, str]]]]:
    spark.sql("CREATE TABLE sf (id BIGINT, k INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds)")
    spark.sql("CREATE TABLE sr (id BIGINT, k INT, amount DOUBLE, ds STRING) USING parquet")
    _rows(spark, 0, rows, 8).write.insertInto("sf")
    _rows(spark, 0, rows // 50, 1).write.insertInto("sr")
    for shape, query in LAYOUT_QUERIES.items():
        for policy in POLICIES:
            gateway.execute(f"CREATE MATERIALIZED TABLE {shape}_{policy} WITH ('refresh.policy' = '{policy}') "
                            f"FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS {query}")
    found: dict[str, list[dict[str, tuple[float, str]]]] = {shape: [] for shape in LAYOUT_QUERIES}
    at = rows
    for turn in range(LAYOUT_ROUNDS):
        _rows(spark, at, rows // 100, 4).write.insertInto("sf")
        at += rows // 100
        spark.sql("SELECT COUNT(*), SUM(amount) FROM sf").collect()     # the new files in the page cache
        for shape in LAYOUT_QUERIES:
            order = ("full", "incremental", "auto") if turn % 2 == 0 else ("full", "auto", "incremental")
            found[shape].append({policy: _refresh(spark, gateway, f"{shape}_{policy}") for policy in order})
            assert found[shape][-1]["incremental"][1] == "incremental", found[shape][-1]
    for shape, query in LAYOUT_QUERIES.items():
        for policy in POLICIES:
            assert equal(spark, f"{shape}_{policy}", query), f"{shape}_{policy} differs from its query"
    return found


def report_layouts(found: dict, rows: int, targets: dict) -> None:
    print(f"Appends of 1 % by four tasks (240 small files) to {rows:,} rows partitioned by 60 days, "
          f"{LAYOUT_ROUNDS} rounds: auto ÷ the better technique over the rounds (target <= 1.1)")
    for shape, rounds in found.items():
        total = {p: sum(r[p][0] for r in rounds) for p in POLICIES}
        ratio = total["auto"] / min(total["incremental"], total["full"])
        targets[f"auto after many-file appends, {shape}"] = ratio <= 1.1
        chose = "/".join(sorted({r["auto"][1] for r in rounds}))
        inc, full = (statistics.median(r[p][0] for r in rounds) for p in ("incremental", "full"))
        print(f"{shape:>10}: incremental {inc:.3f} s, full {full:.3f} s (incremental ÷ full {inc / full:.2f}); "
              f"auto chose {chose}; auto ÷ the better {ratio:.2f}")


def soak(spark, gateway, equal) -> dict[str, dict[str, float]]:
    spark.sql("CREATE TABLE soak (id BIGINT, k INT, amount DOUBLE) USING parquet")
    _rows(spark, 0, SOAK_ROWS, 8).drop("ds").write.insertInto("soak")
    for name, query in SOAK_QUERIES.items():
        gateway.execute(f"CREATE MATERIALIZED TABLE {name} FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
                        f"AS {query}")
    times: dict[str, list[float]] = {name: [] for name in SOAK_QUERIES}
    at, step = SOAK_ROWS, SOAK_ROWS // 5000
    for _ in range(SOAK_APPENDS):
        _rows(spark, at, step, 1).drop("ds").write.insertInto("soak")
        at += step
        for name in SOAK_QUERIES:
            took = timed(lambda n=name: gateway.execute(f"ALTER MATERIALIZED TABLE {n} REFRESH"))
            assert last_run(gateway, name)["technique"] == "incremental"
            times[name].append(took)
    found = {}
    for name, query in SOAK_QUERIES.items():
        assert equal(spark, name, query), f"{name} differs from its query"
        spark.table(name).coalesce(spark.sparkContext.defaultParallelism).write.saveAsTable(f"{name}_copy")
        scan = _scans(spark, (name, f"{name}_copy"), "SELECT COUNT(*), SUM(k), MAX(id) FROM {}"
                      if "filter" in name else "SELECT COUNT(*), SUM(n) FROM {}")
        found[name] = {"tenth": statistics.median(times[name][5:15]), "last": statistics.median(times[name][-10:]),
                       "scan": scan[name], "compacted": scan[f"{name}_copy"],
                       "files": len(spark.table(name).inputFiles())}
    return found


def _scans(spark, tables: tuple[str, ...], query: str) -> dict[str, float]:
    """The median scan of each table, after one untimed scan of each (the first run of a query shape
    compiles its code: timed in a block, it fell on the table scanned first), the tables in turn."""
    for table in tables:
        spark.sql(query.format(table)).collect()
    samples: dict[str, list[float]] = {table: [] for table in tables}
    for _ in range(REPEATS):
        for table in tables:
            samples[table].append(timed(lambda t=table: spark.sql(query.format(t)).collect()))
    return {table: statistics.median(times) for table, times in samples.items()}


def report_soak(found: dict, targets: dict) -> None:
    print(f"Soak: {SOAK_APPENDS} appends of {SOAK_ROWS // 5000} rows (one file each) to {SOAK_ROWS:,} rows, "
          "each refreshed (targets <= 1.3)")
    for name, figures in found.items():
        late, scan = figures["last"] / figures["tenth"], figures["scan"] / figures["compacted"]
        targets[f"{name}: the last refreshes ÷ the tenth"] = late <= 1.3
        targets[f"{name}: a reader's scan ÷ a compacted copy's"] = scan <= 1.3
        print(f"{name:>12}: refresh around the tenth {figures['tenth']:.3f} s, the last ten {figures['last']:.3f} s "
              f"(÷ {late:.2f}); a full scan {figures['scan']:.3f} s ({figures['files']} files) ÷ a compacted copy's "
              f"{figures['compacted']:.3f} s = {scan:.2f}")
