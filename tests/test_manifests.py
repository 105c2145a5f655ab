"""Change capture: beside the published data, the manifest of the files each source had; at the next
refresh each source is unchanged, appended or rewritten, and the history says so with the technique."""

from __future__ import annotations

import json
import os
from urllib.parse import urlparse

from mt_magic.refresh.changes import SourceChange, classify

FULL_SALES = ("CREATE MATERIALIZED TABLE totals FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
              "SELECT ds, SUM(amount) AS total FROM sales GROUP BY ds")


def test_a_source_is_unchanged_appended_or_rewritten():
    before = {"f:/a/1": (10, 1), "f:/a/2": (20, 2)}
    assert classify(before, dict(before)).change is SourceChange.UNCHANGED
    appended = classify(before, {**before, "f:/a/3": (5, 3), "f:/a/4": (7, 4)})
    assert (appended.change, appended.added, appended.added_bytes, appended.total_bytes) == \
        (SourceChange.APPENDED, ("f:/a/3", "f:/a/4"), 12, 42)
    assert appended.describe() == "appended 2 files (12 bytes)"
    assert classify(before, {"f:/a/1": (10, 1)}).change is SourceChange.REWRITTEN            # a file gone
    assert classify(before, {"f:/a/1": (10, 1), "f:/a/2": (21, 2)}).change is SourceChange.REWRITTEN
    assert classify(before, {"f:/a/1": (10, 1), "f:/a/2": (21, 2), "f:/a/5": (3, 5)}).describe() == \
        "rewritten: 1 file removed, 2 written (24 bytes)"
    assert classify(before, {"f:/a/1": (10, 1), "f:/a/2": (20, 9)}).change is SourceChange.REWRITTEN
    assert classify({}, {"f:/a/1": (10, 1)}).change is SourceChange.APPENDED                  # first files
    assert classify(None, before).change is SourceChange.UNKNOWN                                # no manifest
    assert classify(before, None).change is SourceChange.UNKNOWN                                # a view


def _root(gw, name: str) -> str:
    return urlparse(gw.store.get(gw.describe(name)["identifier"]).storage.root).path


def _manifests(gw, name: str) -> list[str]:
    folder = os.path.join(_root(gw, name), "_manifests")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_refreshes_say_what_each_source_did_and_keep_its_files_beside_the_data(spark, gw, sales, store_path):
    gw.execute(FULL_SALES)
    source = f"spark_catalog.{spark.catalog.currentDatabase()}.sales"
    [manifest] = _manifests(gw, "totals")
    with open(os.path.join(_root(gw, "totals"), "_manifests", manifest), encoding="utf-8") as handle:
        files = json.load(handle)["sources"][source]
    assert files and all("/sales/" in path for path in files)
    with open(store_path, encoding="utf-8") as handle:       # the catalog document keeps digests only
        assert next(iter(files)) not in handle.read()

    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 1, 3.0)")
    gw.execute("ALTER MATERIALIZED TABLE totals REFRESH")
    last = gw.history("totals", limit=1)[0]
    assert last["technique"] == "incremental" and last["sources"][source].startswith("appended 1 file (")
    assert len(_manifests(gw, "totals")) == 1 and _manifests(gw, "totals") != [manifest]

    before = _source_files(spark, "sales")
    spark.sql("INSERT OVERWRITE sales VALUES ('2024-01-04', 1, 4.0)")
    now = _source_files(spark, "sales")
    gw.execute("ALTER MATERIALIZED TABLE totals REFRESH")
    said = f"rewritten: {len(before)} files removed, 1 written ({sum(now.values())} bytes)"
    assert gw.history("totals", limit=1)[0]["sources"] == {source: said}

    gw.refresh("totals", schedule_time="2030-01-01 00:00:00")       # nothing changed: a skip
    skipped = gw.history("totals", limit=1)[0]
    assert (skipped["outcome"], skipped["technique"], skipped["sources"]) == ("SKIPPED", "skip", {})
    row = spark.sql("SELECT technique, sources FROM mt_refresh_history('totals') WHERE outcome = 'SUCCEEDED' "
                    "ORDER BY finished DESC LIMIT 1").first()
    assert row["technique"] == "full" and json.loads(row["sources"]) == {source: said}
    assert gw.history("totals", limit=2)[1]["reason"] == f"{source} was rewritten"


def test_a_table_over_a_recomputed_table_sees_it_rewritten(spark, gw, sales):
    gw.execute(FULL_SALES)
    gw.execute("CREATE MATERIALIZED TABLE days FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS "
               "SELECT COUNT(*) AS n FROM totals")
    spark.sql("INSERT INTO sales VALUES ('2024-01-03', 1, 3.0)")
    gw.execute("ALTER MATERIALIZED TABLE totals REFRESH")
    gw.execute("ALTER MATERIALIZED TABLE days REFRESH")
    upstream = gw.describe("totals")["identifier"]
    assert gw.history("days", limit=1)[0]["sources"][upstream].startswith("rewritten: 1 file removed, 1 written (")


def test_dropping_a_table_at_a_path_of_its_own_removes_its_manifests(spark, gw, sales, tmp_path):
    folder = tmp_path / "at"
    folder.mkdir()
    gw.execute(f"CREATE MATERIALIZED TABLE kept WITH ('path' = '{folder}') FRESHNESS = INTERVAL '1' DAY "
               "REFRESH_MODE = FULL AS SELECT ds, amount FROM sales")
    assert (folder / "_manifests").is_dir()
    gw.execute("DROP MATERIALIZED TABLE kept")
    assert folder.is_dir() and not (folder / "_manifests").exists()


def test_a_source_at_a_location_with_url_characters_is_listed(spark, gw, tmp_path):
    """Spark's catalog writes a location as it is: '#' and '%' are part of the folder's name,
    not a URI's fragment, query or escape. Its appends are seen (not an empty listing forever)."""
    folder = tmp_path / "odd #1 %41 ü"
    spark.sql(f"CREATE TABLE odd (k INT, a INT) USING parquet LOCATION '{folder}'")
    spark.sql("INSERT INTO odd VALUES (1, 1)")
    gw.execute("CREATE MATERIALIZED TABLE by_k WITH ('refresh.policy' = 'incremental') FRESHNESS = INTERVAL '1' DAY "
               "REFRESH_MODE = FULL AS SELECT k, SUM(a) AS s FROM odd GROUP BY k")
    source = f"spark_catalog.{spark.catalog.currentDatabase()}.odd"
    spark.sql("INSERT INTO odd VALUES (1, 2)")
    gw.refresh("by_k", schedule_time="2030-01-01 00:00:00")         # a scheduled refresh skips what did not change
    last = gw.history("by_k", limit=1)[0]
    assert (last["outcome"], last["technique"]) == ("SUCCEEDED", "incremental"), last
    assert last["sources"][source].startswith("appended 1 file (")
    assert [tuple(r) for r in spark.table("by_k").collect()] == [(1, 3)]


def _source_files(spark, table: str) -> dict[str, int]:
    """A table's data files and their sizes."""
    location = urlparse(next(r.data_type for r in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
                             if r.col_name == "Location")).path
    return {os.path.join(folder, name): os.path.getsize(os.path.join(folder, name))
            for folder, _, names in os.walk(location) for name in names if not name.startswith(("_", "."))}
