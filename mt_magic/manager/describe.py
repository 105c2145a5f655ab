"""How a materialized table is shown: SHOW CREATE text, DESCRIBE rows, the describe() dict."""

from __future__ import annotations

import json
from datetime import datetime

from mt_magic import config as cfg
from mt_magic.catalog.handlers import handler_document
from mt_magic.catalog.model import MaterializedTable
from mt_magic.refresh.changes import undeterminable, volatile
from mt_magic.sql.statements import quote_identifier, sql_string


def show_create(table: MaterializedTable) -> str:
    """Flink's SHOW CREATE layout (master): columns, COMMENT, PARTITIONED BY, WITH, FRESHNESS, ..."""
    lines = [f"CREATE MATERIALIZED TABLE {table.quoted} ("]
    parts = []
    for column in table.columns:
        if column.computed is not None:
            text = f"  {quote_identifier(column.name)} AS {column.computed}"
        else:
            text = f"  {quote_identifier(column.name)} {column.type.upper()}"
            text += "" if column.nullable else " NOT NULL"
        if column.comment:
            text += f" COMMENT {sql_string(column.comment)}"
        parts.append(text)
    if table.watermark:
        parts.append(f"  WATERMARK FOR {quote_identifier(table.watermark['column'])} AS "
                     f"{table.watermark['expression']}")
    if table.primary_key:
        columns = ", ".join(map(quote_identifier, table.primary_key["columns"]))
        parts.append(f"  CONSTRAINT {quote_identifier(table.primary_key['name'])} PRIMARY KEY ({columns}) "
                     "NOT ENFORCED")
    lines.append(",\n".join(parts))
    lines.append(")")
    if table.comment:
        lines.append(f"COMMENT {sql_string(table.comment)}")
    if table.partition_keys:
        lines.append("PARTITIONED BY (" + ", ".join(map(quote_identifier, table.partition_keys)) + ")")
    if table.options:
        lines.append("WITH (\n" + ",\n".join(f"  {sql_string(k)} = {sql_string(v)}"
                                             for k, v in table.options.items()) + "\n)")
    value, unit = table.freshness.split()
    lines.append(f"FRESHNESS = INTERVAL '{value}' {unit}")
    lines.append(f"REFRESH_MODE = {table.refresh_mode}")
    lines.append(f"AS {table.definition_query}")
    # The running pipeline, as comments: the text stays a statement that can be run again.
    handler = [f"--   {key}: {value}" for key, value in sorted(handler_document(table.refresh_handler).items())
               if key not in ("dynamic_options", "kind") and value not in (None, "", {})]
    if handler:
        lines += ["-- Refresh handler:", *handler]
    strategy = strategy_text(table)
    if strategy:
        lines.append("-- Refresh strategy: " + " ".join(strategy.split()))
    return "\n".join(lines)


def strategy_text(table: MaterializedTable) -> str | None:
    """How a CONTINUOUS table keeps up, and why it does not stream where it does not."""
    if table.refresh_strategy is None:
        return None
    return table.refresh_strategy + (f": {table.strategy_reason}" if table.strategy_reason else "")


def change_detection(table: MaterializedTable) -> str:
    """What tells the pipeline that the sources changed (a skip or a partial refresh rests on it)."""
    calls = volatile(table)
    if calls:
        return f"none: the query calls {', '.join(calls)}, so every trigger recomputes it"
    unknown = undeterminable(table)
    if unknown:
        return (f"none for {', '.join(unknown)} (its state cannot be told from files), so every trigger "
                "recomputes it")
    keys = {s.get("key") for s in table.source_snapshot.values()} - {None}
    by = f", by partition {', '.join(sorted(keys))}" if keys else ""
    return f"snapshots of the sources' files{by}"


def describe_dict(table: MaterializedTable, next_refresh: datetime | None, technique: str,
                  up_to_date: datetime | None) -> dict:
    return {
        "identifier": table.identifier,
        "columns": [(c.name, c.type, c.nullable) for c in table.columns],
        "primary_key": list(table.primary_key["columns"]) if table.primary_key else None,
        "partition_keys": list(table.partition_keys),
        "options": dict(table.options),
        "comment": table.comment,
        "original_query": table.original_query,
        "definition_query": table.definition_query,
        "freshness": table.freshness,
        "logical_refresh_mode": table.logical_refresh_mode,
        "refresh_mode": table.refresh_mode,
        "refresh_status": table.refresh_status,
        "consecutive_failures": table.consecutive_failures,
        "suspend_reason": table.suspend_reason,
        "refresh_handler": handler_document(table.refresh_handler),
        "watermark": dict(table.watermark) if table.watermark else None,
        "source_tables": list(table.source_tables),
        "refresh_strategy": table.refresh_strategy,
        "strategy_reason": table.strategy_reason,
        "change_detection": change_detection(table),
        "refresh_policy": table.options.get(cfg.REFRESH_POLICY, "auto"),
        "technique": technique,
        "location": table.storage.location,
        "partitions": [dict(p.spec) for p in table.storage.partitions],
        "last_refresh": dict(vars(table.last_refresh)) if table.last_refresh else None,
        "next_refresh": next_refresh.isoformat() if next_refresh else None,
        "up_to_date_as_of": up_to_date.isoformat() if up_to_date else None,
        "created_at": table.created_at,
        "updated_at": table.updated_at,
    }


def describe_rows(table: MaterializedTable, extended: bool, next_refresh: datetime | None,
                  technique: str, up_to_date: datetime | None, plan: list[str]) -> list[tuple[str, str, str]]:
    """Spark's DESCRIBE layout, with a section for what makes the table materialized (EXTENDED: the
    maintained `plan` too)."""
    pk = {c.lower() for c in (table.primary_key["columns"] if table.primary_key else ())}
    rows = []
    keys = {k.lower() for k in table.partition_keys}       # last, as Spark's table (and SELECT *) has them
    for column in [c for c in table.columns if c.name.lower() not in keys] + \
            [c for k in table.partition_keys if (c := table.column(k)) is not None]:
        data_type = column.type + ("" if column.nullable else " NOT NULL")
        notes = [n for n in (column.comment, "PRIMARY KEY" if column.name.lower() in pk else None,
                             f"computed: {column.computed}" if column.computed else None) if n]
        rows.append((column.name, data_type, "; ".join(notes)))
    if table.partition_keys:
        rows.append(("# Partition Information", "", ""))
        rows.append(("# col_name", "data_type", "comment"))
        for key in table.partition_keys:
            column = table.column(key)
            rows.append((key, column.type if column else "", ""))
    rows.append(("", "", ""))
    rows.append(("# Materialized Table", "", ""))
    info = [("Freshness", table.freshness),
            ("Logical Refresh Mode", table.logical_refresh_mode),
            ("Refresh Mode", table.refresh_mode),
            ("Refresh Status", table.refresh_status),
            ("Refresh Handler", json.dumps(handler_document(table.refresh_handler), sort_keys=True)),
            ("Next Refresh", next_refresh.isoformat() if next_refresh else ""),
            ("Up To Date As Of", up_to_date.isoformat() if up_to_date else ""),
            ("Change Detection", change_detection(table)),
            ("Refresh Policy", table.options.get(cfg.REFRESH_POLICY, "auto")),
            ("Refresh Technique", technique),
            ("Consecutive Failures", table.consecutive_failures)]
    if table.suspend_reason:
        info.append(("Suspend Reason", table.suspend_reason))
    strategy = strategy_text(table)
    if strategy:
        info.append(("Refresh Strategy", strategy))
    if table.primary_key:
        info.append(("Primary Key", f"{table.primary_key['name']} ({', '.join(table.primary_key['columns'])}) "
                                    "NOT ENFORCED"))
    if table.watermark:
        info.append(("Watermark", f"{table.watermark['column']} AS {table.watermark['expression']}"))
    if extended:
        last = table.last_refresh
        info += [("Identifier", table.identifier),
                 ("Comment", table.comment or ""),
                 ("Options", json.dumps(table.options, sort_keys=True)),
                 ("Source Tables", ", ".join(table.source_tables)),
                 ("Original Query", table.original_query),
                 ("Definition Query", table.definition_query),
                 ("Maintained Plan", "\n".join(plan)),
                 ("Location", table.storage.location if not table.partition_keys else table.storage.root),
                 ("Format", table.storage.format),
                 ("Last Refresh", json.dumps(vars(last), sort_keys=True) if last else ""),
                 ("Created", table.created_at),
                 ("Updated", table.updated_at)]
    rows += [(k, str(v), "") for k, v in info]
    return rows
