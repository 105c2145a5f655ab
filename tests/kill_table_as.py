"""Run by test_kill: CREATE TABLE AS, then CREATE OR REPLACE TABLE AS SIGKILLed between its two renames
(the old table moved aside, the new one not yet under the name)."""

import os
import signal
import sys

from mt_magic import Gateway
from mt_magic.session import local_session
from mt_magic.storage import table_as

store, warehouse, database = sys.argv[1:4]
spark = local_session("mt_magic-kill-table-as", warehouse=warehouse)
spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
gateway = Gateway(spark, catalog_store=store)
gateway.execute(f"CREATE TABLE {database}.t AS SELECT 1 AS gen")
rename = table_as._rename
renames = []


def rename_then_die_before_the_second(*args) -> None:
    renames.append(args)
    if len(renames) == 2:
        print("killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    rename(*args)


table_as._rename = rename_then_die_before_the_second
gateway.execute(f"CREATE OR REPLACE TABLE {database}.t AS SELECT 2 AS gen, 'b' AS tag")   # read otherwise: renamed
print("finished", flush=True)
