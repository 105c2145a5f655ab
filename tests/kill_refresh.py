"""Run by test_kill: a new process that opens the store and starts a slow refresh, to be SIGKILLed."""

import sys

from mt_magic import Gateway
from mt_magic.session import local_session

store, source, warehouse, database = sys.argv[1:5]
spark = local_session("mt_magic-kill", warehouse=warehouse)
spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
spark.sql(f"CREATE TABLE {database}.src (id INT, gen INT, pause BIGINT) USING parquet LOCATION '{source}'")
gateway = Gateway(spark, catalog_store=store)
print("refreshing", flush=True)
gateway.execute(f"ALTER MATERIALIZED TABLE {database}.mt REFRESH")
print("finished", flush=True)
