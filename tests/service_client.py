"""Run by test_service: a notebook-like process on a catalog store.

argv: store ('-' for none: the Gateway finds it), remote ('sc://…' to share the service's application, or 'local' for a kernel with its
own classic session and warehouse), then a Python file run with `spark`, `gw` and `say` (prints a
line the test reads).
"""

import sys
import time

from mt_magic import Gateway
from mt_magic.session import local_session

store, remote, script = sys.argv[1:4]
spark = local_session("mt_magic-client", warehouse=sys.argv[4] if len(sys.argv) > 4 else None,
                      remote=None if remote == "local" else remote)
gw = Gateway(spark, catalog_store=None if store == "-" else store)


def say(*words) -> None:
    print(*words, flush=True)


try:
    with open(script, encoding="utf-8") as handle:
        exec(compile(handle.read(), script, "exec"), {"spark": spark, "gw": gw, "say": say, "time": time})
finally:
    gw.close()
    spark.stop()
