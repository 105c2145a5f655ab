"""Gateway.history: every refresh with its trigger, outcome and runner, newest first, kept beside the store."""

from __future__ import annotations

import os

import pytest

from mt_magic import Gateway, MaterializedTableError


def test_refreshes_are_recorded_newest_first_and_survive_a_new_gateway(spark, gw, sales, store_path, db):
    gw.execute("CREATE MATERIALIZED TABLE daily PARTITIONED BY (ds) "
               "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd') FRESHNESS = INTERVAL '1' DAY "
               "AS SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")
    gw.execute("ALTER MATERIALIZED TABLE daily REFRESH PARTITION (ds = '2024-01-02')")
    spark.sql("INSERT INTO sales VALUES ('2024-01-02', 3, 1.0)")     # else the fire finds nothing new
    gw.refresh("daily", schedule_time="2024-01-03 00:00:00")
    spark.sql("DROP TABLE sales")
    with pytest.raises(MaterializedTableError, match="TABLE_OR_VIEW_NOT_FOUND"):
        gw.execute("ALTER MATERIALIZED TABLE daily REFRESH")
    entries = gw.history("daily")
    assert [e["trigger"] for e in entries] == ["manual", "scheduled", "manual", "initial"]
    assert [e["outcome"] for e in entries] == ["FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    failed, scheduled, partition, initial = entries
    assert "TABLE_OR_VIEW_NOT_FOUND" in failed["error"] and failed["rows"] is None
    assert scheduled["schedule_time"] == "2024-01-03 00:00:00" and scheduled["partitions"] == {"ds": "2024-01-02"}
    assert partition["partitions"] == {"ds": "2024-01-02"} and partition["rows"] == 1
    assert initial["rows"] == 2 and initial["partitions"] == {} and initial["error"] is None
    for entry in entries:
        assert entry["table"] == f"spark_catalog.{db}.daily"
        assert entry["started"] <= entry["finished"]
        assert entry["runner"]["pid"] == os.getpid()
        assert entry["runner"]["application_id"] == spark.conf.get("spark.app.id")
    assert gw.history("daily", limit=2) == entries[:2]
    gw.close()
    again = Gateway(spark, catalog_store=store_path)
    try:
        assert again.history() == entries
        assert again.history("other") == []
    finally:
        again.close()
