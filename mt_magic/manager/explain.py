"""EXPLAIN of a refresh: what it would do now — the strategy, skip or not and why, the partitions,
each source's snapshot against the last one — and Spark's plan. Nothing runs, nothing changes."""

from __future__ import annotations

from typing import Any

from mt_magic import config as cfg
from mt_magic.catalog.model import MaterializedTable
from mt_magic.manager.describe import change_detection, strategy_text
from mt_magic.manager.pipelines import Pipelines
from mt_magic.refresh.changes import Change, SourceChange, compare, deltas, volatile
from mt_magic.refresh.full import refresh_frame
from mt_magic.results import Result
from mt_magic.spark.plans import physical_plan
from mt_magic.spark.errors import spark_call
from mt_magic.storage.versions import Target

COLUMNS = ["item", "value"]


def explain_refresh(pipelines: Pipelines, table: MaterializedTable, spec: dict[str, str]) -> Result:
    runs = pipelines.runs
    snapshot, files = spark_call(lambda: runs.snapshots.take(table), f"Reading the sources of {table.identifier}")
    comparison = compare(table.source_snapshot, snapshot, bool(volatile(table)))
    manifest = runs.manifests.read(table.storage.root, table.source_snapshot)
    changes = deltas(manifest.listings if manifest else None, files, runs.snapshots.relatives(table))
    choice = runs.chooser.choose(table, changes, manifest)
    rows = [("table", table.identifier),
            ("refresh mode", f"{table.refresh_mode} ({strategy_text(table)})" if table.refresh_strategy
             else str(table.refresh_mode)),
            ("change detection", change_detection(table)),
            ("refresh policy", table.options.get(cfg.REFRESH_POLICY, "auto"))]
    chosen = runs.chooser.technique(table) if choice.incremental else f"full: {choice.reason}"
    for source in table.source_tables:
        change = changes[source].change
        rows.append((f"source {source}", f"{changes[source].describe()} → {chosen}" if change is SourceChange.APPENDED
                     else "rewritten → full" if change is SourceChange.REWRITTEN
                     else _source_state(table.source_snapshot.get(source), snapshot[source])))
    if choice.estimate is not None:
        rows.append(("cost estimate", choice.estimate.describe()))
    if comparison.change is Change.NONE:
        scheduled = "would skip: no source changed since the table last matched them"
    elif choice.incremental:
        scheduled = f"would refresh {runs.chooser.technique(table)}"
    elif comparison.change is Change.PARTITIONS:
        scheduled = f"would recompute partitions {comparison.key} in ({', '.join(comparison.values)})"
    else:
        scheduled = f"would recompute the whole table ({choice.reason})"
    rows.append(("a scheduled refresh now", scheduled))
    target = Target(spec)
    what = ", ".join(f"{k}={v}" for k, v in spec.items()) or "the whole table"
    rows.append(("this REFRESH", f"would rewrite {what} (a refresh asked for runs whatever changed)"
                 if spec or comparison.change is Change.NONE or not choice.incremental
                 else f"would refresh {runs.chooser.technique(table)}"))
    frame = spark_call(lambda: refresh_frame(pipelines.ws.spark, table, target), table.identifier)
    rows.append(("Spark plan", physical_plan(frame)))
    return Result.table(COLUMNS, rows, message=f"{table.identifier}: a scheduled refresh now {scheduled}.")


def explain_create(summary: str, definition_query: str, spark: Any) -> Result:
    plan = physical_plan(spark_call(lambda: spark.sql(definition_query), "Spark"))
    return Result.table(COLUMNS, [("statement", summary), ("first refresh", "the whole table"),
                                  ("Spark plan", plan)], message=summary)


def _source_state(before: dict | None, now: dict) -> str:
    if now.get("digest") is None:
        return "state unknown (not files): recomputed at every trigger"
    if not before:
        return "no earlier snapshot"
    if before.get("digest") == now["digest"]:
        return "unchanged"
    old, new = before.get("partitions") or {}, now.get("partitions") or {}
    changed = sorted(v for v in old.keys() | new.keys() if old.get(v) != new.get(v))
    return f"changed (partitions {', '.join(changed)})" if changed and new else "changed"
