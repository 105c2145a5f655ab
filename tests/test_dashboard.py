"""The dashboard's widget state, without a browser: values after refreshes, buttons, errors, escaping."""

from __future__ import annotations

import os
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from helpers import wait_for

from mt_magic import Gateway
from mt_magic.notebook.dashboard import Dashboard, Dashboards, run_for_dashboard
from mt_magic.spark.sessions import session_info

CREATE_T = "CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL AS SELECT * FROM sales"


@pytest.fixture
def board(gw):
    def open_board(identifier: str | None = None) -> Dashboard:
        return Dashboard(gw, run_for_dashboard(gw.execute), identifier)
    return open_board


def cells(dashboard: Dashboard, name: str) -> str:
    row = next(r for i, r in dashboard._rows.items() if i.endswith(f".{name}"))
    return row.cells.value


def buttons(dashboard: Dashboard, name: str) -> dict:
    return next(r for i, r in dashboard._rows.items() if i.endswith(f".{name}")).buttons


def test_a_row_per_table_with_its_last_refresh(gw, sales, board):
    gw.execute(CREATE_T)
    gw.execute("CREATE MATERIALIZED TABLE u FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
               "SELECT product_id FROM sales")
    dashboard = board()
    assert [i.rsplit(".", 1)[1] for i in dashboard._rows] == ["t", "u"]
    row = cells(dashboard, "t")
    for text in ("<b>t</b>", "FULL", "ACTIVATED", "1 HOUR", "SUCCEEDED in", "4 rows (whole table)",
                 "scheduler job spark_catalog.", session_info(gw.spark).application_id, "/ 1 h", "(in "):
        assert text in row
    assert "color:#c0392b" not in row          # data younger than its freshness: not stale
    gw.execute("ALTER MATERIALIZED TABLE t REFRESH")
    detail = board(dashboard.gateway.describe("t")["identifier"])
    assert detail.detail.value.count("SUCCEEDED") == 2


def test_buttons_run_the_statements_and_follow_the_status(gw, sales, board):
    gw.execute(CREATE_T)
    dashboard = board()
    assert not buttons(dashboard, "t")["SUSPEND"].disabled and buttons(dashboard, "t")["RESUME"].disabled
    buttons(dashboard, "t")["SUSPEND"].click()
    assert gw.describe("t")["refresh_status"] == "SUSPENDED"
    assert "SUSPENDED" in cells(dashboard, "t") and "Suspended" in dashboard.message.value
    assert buttons(dashboard, "t")["SUSPEND"].disabled and not buttons(dashboard, "t")["RESUME"].disabled
    buttons(dashboard, "t")["RESUME"].click()
    assert gw.describe("t")["refresh_status"] == "ACTIVATED" and "ACTIVATED" in cells(dashboard, "t")
    buttons(dashboard, "t")["REFRESH"].click()
    assert "Refreshed" in dashboard.message.value
    assert [e["trigger"] for e in gw.history("t")] == ["manual", "initial"]


def test_a_failed_refresh_shows_its_error(gw, sales, board, spark):
    gw.execute(CREATE_T)
    dashboard = board()
    spark.sql("DROP TABLE sales")
    buttons(dashboard, "t")["REFRESH"].click()
    # Spark names the missing source where it meets it: a classic session as it plans the refresh's
    # query (a SparkError), Connect in the refresh's write (the refresh's ExecutionError around it).
    message = dashboard.message.value
    assert message.startswith("<pre style='margin:2px 0'>") and "[TABLE_OR_VIEW_NOT_FOUND]" in message, message
    row = cells(dashboard, "t")
    assert "FAILED in" in row and "TABLE_OR_VIEW_NOT_FOUND" in row


def test_user_strings_are_escaped(gw, sales, board):
    gw.execute("CREATE MATERIALIZED TABLE t COMMENT '<script>alert(1)</script>' REFRESH_MODE = FULL AS "
               "SELECT * FROM sales")
    dashboard = board()
    html = cells(dashboard, "t")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    dashboard.report("<img src=x onerror=alert(1)>")
    assert "<img" not in dashboard.message.value and "&lt;img" in dashboard.message.value


def test_values_update_live_from_the_scheduler_thread(gw, sales):
    gw.execute(CREATE_T)
    boards = Dashboards(gw, run_for_dashboard(gw.execute), interval_s=0.2)
    dashboard = boards.open()
    before = cells(dashboard, "t")
    gw.execute("ALTER MATERIALIZED TABLE t SUSPEND")     # not through the dashboard: only the tick sees it
    wait_for(lambda: "SUSPENDED" in cells(dashboard, "t"), timeout=10)
    assert cells(dashboard, "t") != before
    boards.close()


def test_text_repr_is_deterministic(gw, sales, board):
    gw.execute(CREATE_T)
    dashboard = board()
    first = repr(dashboard)
    gw.execute("ALTER MATERIALIZED TABLE t REFRESH")
    dashboard.update()
    assert repr(dashboard) == first == "Materialized tables: 1\nt: FULL, ACTIVATED, freshness 1 HOUR"


def test_detail_shows_history_and_lineage(gw, sales, board):
    gw.execute(CREATE_T)
    gw.execute("CREATE MATERIALIZED TABLE totals REFRESH_MODE = FULL AS "
               "SELECT product_id, SUM(amount) AS total FROM t GROUP BY product_id")
    t_id, totals_id = gw.describe("t")["identifier"], gw.describe("totals")["identifier"]
    upstream = board(t_id).detail.value
    assert f"{t_id.rsplit('.', 1)[0]}.sales &rarr; <b>{t_id}</b> &rarr; {totals_id}" in upstream
    downstream = board(totals_id).detail.value
    assert f"{t_id} &rarr; <b>{totals_id}</b> &rarr; none" in downstream
    assert "Recent refreshes" in downstream and "whole table" in downstream
    assert downstream.count("class='mt-bar'") == len(gw.history("totals")) == 1     # the chart
    graph = board().graph.value                            # every table, and what reads what
    assert graph.startswith("<svg") and f"{t_id} -&gt; {totals_id}" in graph
    assert graph.count("class='mt-node mt-fresh'") == 2 and "class='mt-node mt-source'" in graph
    gw.execute("ALTER MATERIALIZED TABLE t SUSPEND")
    assert "class='mt-node mt-suspended'" in board().graph.value
    dashboard = board()
    gw.execute("DROP MATERIALIZED TABLE totals")
    gw.execute("DROP MATERIALIZED TABLE t")
    dashboard.sync()         # a notebook's end: its saved picture shows no dropped table
    assert t_id not in dashboard.graph.value and totals_id not in dashboard.graph.value


def test_a_streaming_table_shows_its_query_and_batches(gw, sales, board, tmp_path):
    gw.execute(f"SET 'execution.checkpointing.dir' = '{tmp_path}/cp'")
    gw.execute("CREATE MATERIALIZED TABLE s FRESHNESS = INTERVAL '1' SECOND REFRESH_MODE = CONTINUOUS AS "
               "SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    query_id = gw.describe("s")["refresh_handler"]["streaming_query_id"]
    dashboard = board()
    wait_for(lambda: (dashboard.update(), "(batch)" in cells(dashboard, "s"))[1], timeout=60)
    assert f"streaming query {query_id}" in cells(dashboard, "s") and "CONTINUOUS" in cells(dashboard, "s")
    gw.execute("DROP MATERIALIZED TABLE s")
    dashboard.update()                       # another thread: the row stays, marked
    assert cells(dashboard, "s").endswith(": dropped</td></tr></table>")
    dashboard.sync()                         # the main thread: the row goes
    assert list(dashboard._rows) == []


def test_the_notebook_text_form_is_the_whole_repr(gw, sales, board):
    for name in ("first_table_with_a_long_name", "second_table_with_a_long_name"):
        gw.execute(f"CREATE MATERIALIZED TABLE {name} REFRESH_MODE = FULL AS SELECT * FROM sales")
    dashboard = board()
    bundle = dashboard._repr_mimebundle_()
    assert len(repr(dashboard)) > 110 and bundle["text/plain"] == repr(dashboard)
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_the_dashboard_says_who_owns_the_store_and_works_in_a_client(spark, gw, sales, store_path):
    gw.execute(CREATE_T)
    assert "owned by this kernel" in Dashboard(gw, run_for_dashboard(gw.execute)).owner.value
    client = Gateway(spark, catalog_store=store_path)
    try:
        dashboard = Dashboard(client, run_for_dashboard(client.execute))
        assert f"owned by kernel pid {os.getpid()}" in dashboard.owner.value
        assert "this kernel is its client" in dashboard.owner.value
        assert "ACTIVATED" in cells(dashboard, "t")
        buttons(dashboard, "t")["SUSPEND"].click()           # sent to the owner, which applies it
        assert gw.describe("t")["refresh_status"] == "SUSPENDED"
        wait_for(lambda: "SUSPENDED" in cells(dashboard, "t"), timeout=10)
    finally:
        client.close()


def test_times_show_in_the_session_time_zone_as_schedules_do(spark, gw, sales, board):
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        gw.execute(CREATE_T)
        next_refresh = datetime.fromisoformat(gw.describe("t")["next_refresh"])
        shown = next_refresh.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M:%S")
        assert shown in cells(board(), "t")
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def test_the_refresh_chart_colours_each_run_by_its_technique(spark, gw, sales, board):
    gw.execute("CREATE MATERIALIZED TABLE totals FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
               "SELECT product_id, SUM(amount) AS total FROM sales GROUP BY product_id")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 1, 2.0)")
    gw.refresh("totals", schedule_time="2030-01-01 00:00:00")
    gw.refresh("totals", schedule_time="2030-01-02 00:00:00")
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-01-04', 1, 2.0)")
    gw.refresh("totals", schedule_time="2030-01-03 00:00:00")
    chart = board(gw.describe("totals")["identifier"]).detail.value
    techniques = [e["technique"] for e in reversed(gw.history("totals"))]
    assert techniques == ["full", "incremental", "skip", "full"]
    assert re.findall(r"class='mt-bar' data-technique='(\w+)'", chart) == techniques
    assert re.search(r"was rewritten \(decide [\d.]+ s, run [\d.]+ s, record [\d.]+ s[^)]*\)</title>", chart)  # and why


def test_a_large_store_shows_a_page_at_a_time_filtered_by_name_database_and_state(gw, sales, db):
    gw.execute("SET 'materialized-table.full.initialize' = 'on-schedule'")
    for name in ("a1", "a2", "b1", "b2", "b3"):
        gw.execute(f"CREATE MATERIALIZED TABLE {name} REFRESH_MODE = FULL AS SELECT * FROM sales")
    gw.execute("ALTER MATERIALIZED TABLE b2 SUSPEND")
    assert Dashboard(gw, run_for_dashboard(gw.execute)).paging.layout.display == "none"    # one page: no bar
    dashboard = Dashboard(gw, run_for_dashboard(gw.execute), page_size=2)
    paging = dashboard.paging

    def shown() -> list[str]:
        return [i.rsplit(".", 1)[1] for i in dashboard._rows]

    assert paging.layout.display == "" and shown() == ["a1", "a2"] and paging.previous.disabled
    assert "tables 1–2 of 5, page 1 of 3" in paging.label.value
    paging.next.click()
    assert shown() == ["b1", "b2"]
    paging.next.click()
    assert shown() == ["b3"] and paging.next.disabled
    paging.text.value = "B"                              # back to page one of what matches
    assert shown() == ["b1", "b2"] and "of 3 (5 in the store)" in paging.label.value
    paging.state.value = "suspended"
    assert shown() == ["b2"]
    paging.text.value, paging.state.value = "", "all states"
    assert paging.database.options == ("all databases", f"spark_catalog.{db}")
    paging.database.value = f"spark_catalog.{db}"
    assert shown() == ["a1", "a2"]
    paging.text.value = "zzz"
    assert shown() == [] and "tables none of 0" in paging.label.value and paging.layout.display == ""
