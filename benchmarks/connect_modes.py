"""Classic session and Spark Connect, side by side, in one run.

PySpark runs one kind of session per process, so the script runs itself twice (classic, then as a
client of a local Connect server) on the same data and prints both and their ratios:
(a) a FULL refresh (300k rows, 30 partitions) ÷ plain Spark's INSERT OVERWRITE in the same mode,
    and Connect ÷ classic for the refresh                                           (target ≤ 1.2)
(b) statement overhead beyond Spark's own analysis of the query: CREATE planning (what --dry-run
    and execute share), ALTER AS, SUSPEND/RESUME, SHOW                              (target ≤ 50 ms)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from workload import PLAIN_QUERY, QUERY, REPEATS, median, open_workload, timed


def measure(remote: str | None) -> dict:
    spark, gateway = open_workload(300000, 30, remote)
    try:
        gateway.execute(f"CREATE MATERIALIZED TABLE mt PARTITIONED BY (ds) FRESHNESS = INTERVAL '1' DAY AS {QUERY}")
        plain_times, mt_times = [], []
        for _ in range(REPEATS):     # alternating, so drift hits both alike
            plain_times.append(timed(lambda: spark.sql(f"INSERT OVERWRITE plain {PLAIN_QUERY}").collect()))
            mt_times.append(timed(lambda: gateway.execute("ALTER MATERIALIZED TABLE mt REFRESH")))
        analysis = median(lambda: spark.sql(QUERY).schema, 10)
        gateway.execute("SET 'materialized-table.full.initialize' = 'on-schedule'")
        plan = median(lambda: gateway.execute(f"CREATE MATERIALIZED TABLE c REFRESH_MODE = FULL AS {QUERY}",
                                              dry_run=True))
        gateway.execute(f"CREATE MATERIALIZED TABLE c REFRESH_MODE = FULL AS {QUERY}")
        alter = median(lambda: gateway.execute(f"ALTER MATERIALIZED TABLE c AS {QUERY}"))
        suspend = median(lambda: gateway.execute(
            "ALTER MATERIALIZED TABLE c SUSPEND; ALTER MATERIALIZED TABLE c RESUME")) / 2
        show = median(lambda: gateway.execute("SHOW MATERIALIZED TABLES"), 10)
        return {"refresh": statistics.median(mt_times), "plain": statistics.median(plain_times),
                "analysis": analysis, "plan": plan, "alter": alter, "suspend": suspend, "show": show}
    finally:
        gateway.close()
        spark.stop()


def main() -> None:
    if len(sys.argv) > 1:
        remote = None if sys.argv[1] == "classic" else sys.argv[1]
        print(json.dumps(measure(remote)))
        return
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("MT_MAGIC_SPARK_REMOTE", None)
    results = {}
    for mode, arg in (("classic", "classic"), ("connect", "local[2]")):
        out = subprocess.run([sys.executable, __file__, arg], env=env, capture_output=True, text=True, check=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    for mode, r in results.items():
        ms = {k: v * 1000 for k, v in r.items()}
        print(f"{mode:8} (a) FULL refresh {r['refresh']:.3f} s ÷ plain INSERT OVERWRITE {r['plain']:.3f} s "
              f"= {r['refresh'] / r['plain']:.2f}")
        print(f"{mode:8} (b) Spark's analysis {ms['analysis']:.1f} ms; beyond it: CREATE plan "
              f"{ms['plan'] - ms['analysis']:.1f} ms, ALTER AS {ms['alter'] - ms['analysis']:.1f} ms; "
              f"SUSPEND or RESUME {ms['suspend']:.1f} ms; SHOW {ms['show']:.1f} ms (target <= 50 ms)")
    classic, connect = results["classic"], results["connect"]
    print(f"Connect ÷ classic: FULL refresh {connect['refresh'] / classic['refresh']:.2f} (target <= 1.2); "
          f"plain Spark {connect['plain'] / classic['plain']:.2f}")


if __name__ == "__main__":
    main()
