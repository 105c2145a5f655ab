"""The rows an append takes away from a linear table — stopped by a NOT EXISTS or NOT IN, padded rows an
outer join now matches (`linear.Term`, weight −1). A linear table keeps no state: its rows are plain
files, so the files they are in are written again without them.

Rows are compared as the table stores them — every term shaped as the table's columns (cast, computed
columns computed) — so that a row taken away is exactly the row written: the published rows and the
added ones, EXCEPT ALL the taken ones (a row written twice and stopped once stays once; a row added by
the same refresh and stopped by it is never written). Only formats that store every value as it was
computed take rows away (`EXACT_FORMATS`); a table in another recomputes. A table that keeps its rows
by source partition writes again only the partitions the taken rows are of: those rows are written to
a stage first, read both for their partitions and for the rows they leave."""

from __future__ import annotations

from mt_magic.catalog.model import MaterializedTable
from mt_magic.incremental.provenance import PARTITION
from mt_magic.refresh.full import shaped
from mt_magic.refresh.provenance_state import Keeping
from mt_magic.refresh.relations import Relations
from mt_magic.spark.errors import spark_call
from mt_magic.spark.partition_folders import folder_text
from mt_magic.sql.statements import quote_identifier
from mt_magic.storage.versions import TableStorage

EXACT_FORMATS = ("parquet", "orc")
STAGE_FORMAT = "parquet"


def without(table: MaterializedTable, published: str | None, added: str | None, taken: str | None,
            keeping: Keeping | None) -> str:
    """The table's rows after the change, shaped: those of `published` (a relation of its rows as stored;
    `keeping`: each with its source partition) and the `added` query's, EXCEPT ALL the rows `taken` (a
    shaped query; None: none)."""
    columns = ", ".join([*(quote_identifier(c.name) for c in table.columns), *[PARTITION] * (keeping is not None)])
    kept = [f"SELECT {columns} FROM {published}"] if published is not None else []
    kept += [shaped(table, added, keeping)] if added is not None else []
    rows = " UNION ALL ".join(kept) or f"SELECT * FROM ({taken}) AS mt_none WHERE false"
    return rows if taken is None else f"SELECT * FROM ({rows}) AS mt_kept EXCEPT ALL SELECT * FROM ({taken}) AS mt_taken"


def staged(storage: TableStorage, table: MaterializedTable, taken: str, keeping: Keeping,
           relations: Relations) -> tuple[str, set[str]]:
    """The `taken` query's rows (tagged with their source partition) written to a stage the run removes
    as it ends: a query of them, and the partitions they are of (their folders' text, as kept)."""
    stage = storage.new_version(table)
    relations.on_exit(lambda: storage.remove(stage))
    doing = f"Refreshing {table.identifier}"
    with relations.query(shaped(table, taken, keeping)) as frame:
        schema = spark_call(lambda: frame.schema, doing)
        spark_call(lambda: frame.write.format(STAGE_FORMAT).mode("error").save(stage), doing)
    files = sorted(storage.files.listing(stage))
    if not files:       # (a query over no files at all would not run: its rows' count never comes back)
        return f"SELECT * FROM {relations.add('taken', relations.spark.createDataFrame([], schema))}", set()
    rows = relations.add("taken", relations.files(STAGE_FORMAT, schema, files))
    with relations.query(f"SELECT DISTINCT {PARTITION} FROM {rows}") as frame:
        return f"SELECT * FROM {rows}", {folder_text(row[0]) for row in spark_call(frame.collect, doing)}
