"""`make demo`: a FULL-mode materialized table on a local SparkSession, end to end."""

from __future__ import annotations

import os
import shutil
import tempfile

from mt_magic import Gateway
from mt_magic.results import Result
from mt_magic.session import local_session


def show(title: str, result: Result) -> None:
    print(f"\n-- {title}\n{result.message}")
    if result.columns:
        print("  " + " | ".join(result.columns))
        for row in result.rows:
            print("  " + " | ".join("NULL" if v is None else str(v) for v in row))


def main() -> None:
    work = tempfile.mkdtemp(prefix="mt_magic-demo-")
    spark = local_session("mt_magic-demo", warehouse=os.path.join(work, "warehouse"))
    gateway = Gateway(spark, catalog_store=os.path.join(work, ".mt_magic", "catalog.json"))
    try:
        spark.sql("CREATE TABLE sales (ds STRING, product_id INT, amount DOUBLE) USING parquet")
        spark.sql("INSERT INTO sales VALUES ('2024-01-01', 1, 10.0), ('2024-01-01', 2, 5.0), "
                  "('2024-01-02', 1, 7.5)")
        steps = [
            ("create", """CREATE MATERIALIZED TABLE daily_sales
                          PARTITIONED BY (ds)
                          WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
                          FRESHNESS = INTERVAL '1' HOUR
                          AS SELECT ds, product_id, SUM(amount) AS total
                             FROM sales GROUP BY ds, product_id"""),
            ("the table, filled at CREATE", "SELECT * FROM daily_sales ORDER BY ds, product_id"),
            ("new sales arrive", "INSERT INTO sales VALUES ('2024-01-02', 2, 4.0), ('2024-01-01', 3, 1.0)"),
            ("refresh one day", "ALTER MATERIALIZED TABLE daily_sales REFRESH PARTITION (ds = '2024-01-02')"),
            ("only 2024-01-02 changed", "SELECT * FROM daily_sales ORDER BY ds, product_id"),
            ("suspend", "ALTER MATERIALIZED TABLE daily_sales SUSPEND"),
            ("resume", "ALTER MATERIALIZED TABLE daily_sales RESUME"),
            ("evolve the query", """ALTER MATERIALIZED TABLE daily_sales AS
                                    SELECT ds, product_id, SUM(amount) AS total, COUNT(*) AS sales
                                    FROM sales GROUP BY ds, product_id"""),
            ("refresh everything", "ALTER MATERIALIZED TABLE daily_sales REFRESH"),
            ("after the refresh", "SELECT * FROM daily_sales ORDER BY ds, product_id"),
            ("show", "SHOW MATERIALIZED TABLES"),
            ("describe", "DESCRIBE daily_sales"),
            ("show create", "SHOW CREATE MATERIALIZED TABLE daily_sales"),
        ]
        for title, sql in steps:
            show(title, gateway.execute(sql)[-1])
        print("\n-- the scheduler at 2024-01-03 00:00:00 refreshes ds = 2024-01-02:")
        print(gateway.refresh("daily_sales", schedule_time="2024-01-03 00:00:00").message)
        show("drop", gateway.execute("DROP MATERIALIZED TABLE daily_sales")[-1])
    finally:
        gateway.close()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
