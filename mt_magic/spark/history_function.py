"""`SELECT * FROM mt_refresh_history('daily_sales')` in Spark SQL: a Python table function that
reads the refresh history in the catalog store's folder.

It runs in a Python worker of the Spark application (over Connect, the server's), which must see the
store's folder and import mt_magic — as the CONTINUOUS sink must. The name matches a table's
identifier whole or by its last parts (`daily_sales`, `db.daily_sales`); no argument (or NULL) gives
every table's history, newest first. Of the tables as they are now: a second argument TRUE adds the
runs of tables dropped before (`created` tells the tables of one name apart).
"""

from __future__ import annotations

import json
from typing import Any

FUNCTION_NAME = "mt_refresh_history"
SCHEMA = ("table string, created string, trigger string, schedule_time string, started string, finished string, "
          "outcome string, rows bigint, partitions string, error string, lag_s double, freshness_s double, "
          "reason string, technique string, sources string, estimate string, delta_rows bigint, delta_bytes bigint, "
          "inserted bigint, deleted bigint, table_rows bigint, jobs bigint, phases string, host string, pid int, application_id string")


def register_history_function(spark: Any, store_path: str) -> None:
    from pyspark.sql.functions import udtf

    class RefreshHistoryFunction:
        def eval(self, name: str | None = None, earlier: bool | None = None):
            from mt_magic.catalog.history import RefreshHistory
            wanted = (name or "").replace("`", "").lower()
            for entry in RefreshHistory(store_path).entries(earlier=bool(earlier)):
                table = entry.get("table", "")
                if wanted and table.lower() != wanted and not table.lower().endswith("." + wanted):
                    continue
                runner = entry.get("runner") or {}
                yield (table, entry.get("created"), entry.get("trigger"), entry.get("schedule_time"), entry.get("started"),
                       entry.get("finished"), entry.get("outcome"), entry.get("rows"),
                       json.dumps(entry.get("partitions") or {}, sort_keys=True), entry.get("error"),
                       entry.get("lag_s"), entry.get("freshness_s"), entry.get("reason"), entry.get("technique"),
                       json.dumps(entry.get("sources") or {}, sort_keys=True), entry.get("estimate"),
                       entry.get("delta_rows"), entry.get("delta_bytes"), entry.get("inserted"),
                       entry.get("deleted"), entry.get("table_rows"), entry.get("jobs"),
                       json.dumps(entry.get("phases") or {}, sort_keys=True), runner.get("host"), runner.get("pid"),
                       runner.get("application_id"))

    spark.udtf.register(FUNCTION_NAME, udtf(RefreshHistoryFunction, returnType=SCHEMA))
