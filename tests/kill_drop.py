"""Run by test_kill: a new owner of the store DROPs a table and is SIGKILLed after deleting the first
of its data files."""

import os
import signal
import sys

from mt_magic import Gateway
from mt_magic.session import local_session
from mt_magic.spark.files import files_for

store, warehouse, name = sys.argv[1:4]
spark = local_session("mt_magic-kill-drop", warehouse=warehouse)
gateway = Gateway(spark, catalog_store=store)


def delete_one_file_then_die(self, path: str) -> None:
    for folder, _, names in os.walk(path.removeprefix("file:")):
        data = sorted(n for n in names if n.endswith(".parquet"))
        if data:
            os.unlink(os.path.join(folder, data[0]))
            break
    print("killed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


type(files_for(spark)).delete = delete_one_file_then_die
gateway.execute(f"DROP MATERIALIZED TABLE {name}")
print("finished", flush=True)
