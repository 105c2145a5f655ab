"""Tab in a %%mtsql cell: the kernel round trip of a completion request (what a Jupyter front end sends),
at 10 and at 500 tables, and the Spark jobs completion started (target: none).

A real kernel with the autoload, a classic local session in it, N plain tables and five materialized
tables. Per size, 60 requests of four kinds (tables after FROM, columns after an alias, materialized
tables after ALTER, keywords); every fifth batch follows a cell that ran, so the names are looked up
again (a cache miss) — the p95 shows it. Jobs are counted in the kernel's thread job group set before
the requests. Targets: median under 100 ms at 500 tables, no Spark job.

    python benchmarks/completion.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import kernels, run  # noqa: E402
from workload import exit_on_missed  # noqa: E402

SIZES = (10, 500)
REQUESTS = [("%%mtsql\nSELECT * FROM t", None), ("%%mtsql\nSELECT s. FROM t_1 s", "SELECT s."),
            ("%%mtsql\nALTER MATERIALIZED TABLE m", None), ("%%mtsql\nCREATE MATERIALIZED TABLE x ", None)]
BATCHES = 15


def completion_times(client) -> list[float]:
    times = []
    for batch in range(BATCHES):
        if batch % 5 == 0:
            run(client, "pass")             # a cell ran: the names are looked up again
        for code, at in REQUESTS:
            cursor = len(code) if at is None else code.index(at) + len(at)
            started = time.perf_counter()
            reply = client.complete(code, cursor, reply=True, timeout=60)["content"]
            times.append(time.perf_counter() - started)
            assert reply["status"] == "ok" and reply["matches"], (code, reply)
    return times


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="mt_magic-completion-"))
    results = {}
    with kernels(folder) as start:
        client = start(MT_MAGIC_SPARK_REMOTE="")
        _, _, error = run(client, f"from mt_magic.session import local_session\n"
                                  f"spark = local_session(warehouse={str(folder / 'warehouse')!r})")
        assert error is None, error
        made = 0
        for size in SIZES:
            statements = [f"CREATE TABLE t_{i} (id INT, amount DOUBLE, city STRING) USING parquet"
                          for i in range(made, size)]
            made = size
            _, _, error = run(client, "for s in " + repr(statements) + ":\n    spark.sql(s)")
            assert error is None, error
            if size == SIZES[0]:
                _, _, error = run(client, "%%mtsql\n" + ";\n".join(
                    f"CREATE MATERIALIZED TABLE m_{i} FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
                    f"SELECT city, SUM(amount) AS total FROM t_{i} GROUP BY city" for i in range(5)))
                assert error is None, error
            run(client, "spark.sparkContext.setJobGroup('mt-completion', 'completion benchmark')")
            times = completion_times(client)
            _, jobs, error = run(client, "len(spark.sparkContext.statusTracker().getJobIdsForGroup('mt-completion'))")
            assert error is None, error
            run(client, "spark.sparkContext.setJobGroup(None, None)")
            results[size] = (statistics.median(times), statistics.quantiles(times, n=20)[18], int(jobs))

    targets = {}
    for size, (median, p95, jobs) in results.items():
        print(f"{size:>4} tables + 5 materialized: completion round trip median {median * 1000:.1f} ms, "
              f"p95 {p95 * 1000:.1f} ms; Spark jobs started while completing: {jobs}")
        targets[f"no Spark job at {size} tables"] = jobs == 0
    targets["median under 100 ms at 500 tables"] = results[SIZES[-1]][0] < 0.1
    exit_on_missed(targets)


if __name__ == "__main__":
    main()
