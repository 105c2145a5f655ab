"""Run by test_continuous: a process whose continuous table is fed until it is SIGKILLed."""

import sys

from mt_magic import Gateway
from mt_magic.session import local_session

store, source, warehouse, database = sys.argv[1:5]
spark = local_session("mt_magic-kill-stream", warehouse=warehouse)
spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
spark.sql(f"CREATE TABLE {database}.orders (user_id INT, amount DOUBLE) USING parquet LOCATION '{source}'")
spark.sql(f"INSERT INTO {database}.orders VALUES (0, 3.0)")
gateway = Gateway(spark, catalog_store=store)
gateway.execute(f"CREATE MATERIALIZED TABLE {database}.per_user FRESHNESS = INTERVAL '1' SECOND AS "
                f"SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM {database}.orders GROUP BY user_id; "
                f"CREATE MATERIALIZED TABLE {database}.big FRESHNESS = INTERVAL '1' SECOND AS "
                f"SELECT user_id, amount FROM {database}.orders WHERE amount > 2")
for i in range(10_000):
    spark.sql(f"INSERT INTO {database}.orders VALUES ({i % 3}, {i % 5}.0), ({i % 4}, 3.0)")
    progress = gateway.progress(f"{database}.big") or {}
    print(f"appended {i} batch {progress.get('batch_id')}", flush=True)
