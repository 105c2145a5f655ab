"""EXPLAIN of a refresh: what it would do now — the decision a scheduled refresh and this REFRESH
would take, each source's snapshot against the last one — and Spark's plan. Nothing runs, nothing
changes."""

from __future__ import annotations

from typing import Any

from mt_magic import config as cfg
from mt_magic.catalog.history import Technique, Trigger
from mt_magic.catalog.model import MaterializedTable
from mt_magic.manager.describe import change_detection, strategy_text
from mt_magic.manager.pipelines import Pipelines
from mt_magic.refresh.changes import SourceChange
from mt_magic.incremental.aggregate import Aggregate
from mt_magic.incremental.below_join import below
from mt_magic.incremental.plan import maintained_plan
from mt_magic.refresh.choice import FULL_BY_POLICY, rule_by_syntax
from mt_magic.refresh.decision import RefreshDecision, Situation, decide
from mt_magic.refresh.full import refresh_frame
from mt_magic.results import Result
from mt_magic.spark.query_plans import physical_plan
from mt_magic.spark.errors import spark_call
from mt_magic.sql.volatile import volatile_note

COLUMNS = ["item", "value"]


def explain_refresh(pipelines: Pipelines, table: MaterializedTable, spec: dict[str, str]) -> Result:
    situation = spark_call(lambda: pipelines.situation(table), f"Reading the sources of {table.identifier}")
    scheduled = decide(situation, {}, Trigger.SCHEDULED, only_changed=True)
    asked = decide(situation, spec, Trigger.MANUAL, only_changed=False)
    rows = [("table", table.identifier),
            ("refresh mode", f"{table.refresh_mode} ({strategy_text(table)})" if table.refresh_strategy
             else str(table.refresh_mode)),
            ("change detection", change_detection(table)),
            ("refresh policy", table.options.get(cfg.REFRESH_POLICY, "auto"))]
    rows += _noted(table.definition_query)
    rows += [(f"source {source}", _source_text(situation, scheduled, source)) for source in table.source_tables]
    rows.append(("maintained plan", "\n".join(pipelines.plan(table))))
    if scheduled.keeping is not None:
        layout = below(scheduled.rule, scheduled.keeping.provenance.occurrence) \
            if isinstance(scheduled.rule, Aggregate) else None
        rows.append(("state kept", scheduled.keeping.describe(layout)))
    if scheduled.estimate is not None:
        rows.append(("cost estimate", scheduled.estimate.describe()))
    rows += [("a scheduled refresh now", f"would {scheduled.describe()}"),
             ("this REFRESH", f"would {asked.describe()}")]
    frame = spark_call(lambda: refresh_frame(pipelines.ws.spark, table, asked.target), table.identifier)
    rows.append(("Spark plan", physical_plan(frame)))
    return Result.table(COLUMNS, rows, message=f"{table.identifier}: a scheduled refresh now would "
                                               f"{scheduled.describe()}.")


def explain_create(summary: str, definition_query: str, options: dict[str, str], spark: Any,
                   pipelines: Pipelines, table: MaterializedTable | None) -> Result:
    """The maintained plan the table's refreshes will run: `table`'s, as the refresh judges its query
    over its sources (how each source's files are read, from a snapshot of them, as EXPLAIN of a refresh
    does) and DESCRIBE shows it then; None — an existing table altered — by the query's syntax."""
    plan = physical_plan(spark_call(lambda: spark.sql(definition_query), "Spark"))
    if options.get(cfg.REFRESH_POLICY) == "full":
        maintained = FULL_BY_POLICY
    elif table is None:
        maintained = "\n".join(maintained_plan(rule_by_syntax(definition_query)))
    else:
        spark_call(lambda: pipelines.situation(table), f"Reading the sources of {table.identifier}")
        maintained = "\n".join(pipelines.plan(table))
    return Result.table(COLUMNS, [("statement", summary), ("first refresh", "the whole table"),
                                  *_noted(definition_query), ("maintained plan", maintained), ("Spark plan", plan)],
                        message=summary)


def _noted(definition_query: str) -> list[tuple[str, str]]:
    note = volatile_note(definition_query)
    return [("note", note)] if note else []


def _source_text(situation: Situation, scheduled: RefreshDecision, source: str) -> str:
    """The source's change since the data was computed, and what a scheduled refresh does with it."""
    if scheduled.technique is not Technique.SKIP:
        delta = situation.changes[source]
        if delta.change in (SourceChange.APPENDED, SourceChange.REWRITTEN):
            how = scheduled.rule.describe() if scheduled.technique is Technique.INCREMENTAL and scheduled.rule \
                else f"full: {scheduled.reason}"
            return f"{scheduled.sources.get(source, delta.describe())} → {how}"
    before, now = situation.table.source_snapshot.get(source), situation.snapshot[source]
    if now.get("digest") is None:
        return "state unknown (not files): recomputed at every trigger"
    if not before:
        return "no earlier snapshot"
    if before.get("digest") == now["digest"]:
        return "unchanged"
    old, new = before.get("partitions") or {}, now.get("partitions") or {}
    changed = sorted(v for v in old.keys() | new.keys() if old.get(v) != new.get(v))
    return f"changed (partitions {', '.join(changed)})" if changed and new else "changed"
