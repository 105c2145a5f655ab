"""What the notebook layer costs, measured in one run on one local SparkSession.

(a) `%mtsql SELECT …` through a real IPython shell ÷ plain `spark.sql(…).limit(101).collect()`
(b) one live dashboard update (what the scheduler thread does each second) for 20 tables, in ms
(c) the autoload startup file: time to run it, and whether it imported mt_magic (it must not)
"""

from __future__ import annotations

import os
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

from IPython.testing.globalipapp import start_ipython

from mt_magic.session import local_session

REPEATS = 20
QUERY = "SELECT product_id, SUM(amount) AS total FROM src GROUP BY product_id ORDER BY product_id"
STARTUP = Path(__file__).resolve().parents[1] / "jupyter-config/ipython/startup/90-mt-magic.py"


def median_s(action, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    work = tempfile.mkdtemp(prefix="mt_magic-bench-")
    os.environ["MT_MAGIC_CATALOG_STORE"] = os.path.join(work, "store", "catalog.json")
    spark = local_session("mt_magic-bench", warehouse=os.path.join(work, "warehouse"))
    shell = start_ipython()
    shell.user_ns["spark"] = spark
    shell.run_line_magic("load_ext", "mt_magic")
    try:
        spark.range(100_000).selectExpr("id % 50 AS product_id", "CAST(id AS DOUBLE) AS amount") \
            .write.saveAsTable("src")
        shell.run_line_magic("mtsql", "SELECT 1")                    # open the gateway
        for _ in range(3):                                           # warm up both paths
            spark.sql(QUERY).limit(101).collect()
            shell.run_line_magic("mtsql", QUERY)
        plain = median_s(lambda: spark.sql(QUERY).limit(101).collect())
        magic = median_s(lambda: shell.run_line_magic("mtsql", QUERY))
        print(f"(a) %mtsql SELECT {magic * 1000:.1f} ms ÷ plain spark.sql {plain * 1000:.1f} ms "
              f"= {magic / plain:.2f}")

        for i in range(20):
            shell.run_line_magic("mtsql", f"CREATE MATERIALIZED TABLE mt{i} FRESHNESS = INTERVAL '1' DAY "
                                          "REFRESH_MODE = FULL AS SELECT * FROM src WHERE product_id < 5")
        dashboard = shell.run_line_magic("mtsql", "dashboard")
        update = median_s(dashboard.update)
        print(f"(b) one dashboard update, 20 tables: {update * 1000:.1f} ms "
              f"({update * 100:.1f} % of one core at one update a second)")

        shell.run_line_magic("unload_ext", "mt_magic")
        for name in [m for m in sys.modules if m.startswith("mt_magic")]:
            del sys.modules[name]
        start = time.perf_counter()
        runpy.run_path(str(STARTUP))
        took = time.perf_counter() - start
        print(f"(c) startup file: {took * 1000:.2f} ms; mt_magic imported: {'mt_magic' in sys.modules}; "
              f"declared: {'mtsql' in shell.magics_manager.lazy_magics}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
