"""What killed processes left behind, cleared by a new owner of the store before anything else runs:
half-done CREATE TABLE AS writes, and temporary files of the store's JSON writes; and folders
retired by replaced or dropped tables, deleted by the owner once older than the retention."""

from __future__ import annotations

import logging
import os

from mt_magic.catalog.history import HISTORY_DIR
from mt_magic.catalog.jsonfile import remove_stale_temporaries
from mt_magic.catalog.mailbox import MAILBOX_DIR
from mt_magic.catalog.pending import PENDING_DIR
from mt_magic.catalog.records import RECORDS_DIR
from mt_magic.errors import MaterializedTableError
from mt_magic.manager.workspace import Workspace
from mt_magic.spark.errors import SPARK_ERRORS, spark_message
from mt_magic.storage.table_as import recover_table_as

log = logging.getLogger(__name__)
STALE_TEMPORARY_S = 60.0       # a JSON write takes milliseconds; one this old lost its writer
SWEEP_EVERY_S = 60.0           # how often the owner deletes retired folders that are old enough


def clear_leftovers(ws: Workspace) -> list[str]:
    """Finish or undo each abandoned write; returns warnings for those that could not be."""
    warnings = []
    for write_id, note in ws.pending.abandoned():
        name = f"{note['catalog']}.{note['database']}.{note['name']}"
        try:
            recover_table_as(ws.spark, note, ws.pending)
            ws.pending.end(write_id)
            log.info("Recovered the interrupted CREATE TABLE AS of %s", name)
        except (MaterializedTableError, *SPARK_ERRORS) as error:
            warnings.append(f"{name}: recovering an interrupted CREATE TABLE AS: {spark_message(error)}")
    home = ws.home()
    remove_stale_temporaries([home] + [os.path.join(home, d) for d in (HISTORY_DIR, PENDING_DIR, MAILBOX_DIR, RECORDS_DIR)],
                             STALE_TEMPORARY_S)
    remove_stale_temporaries([os.path.dirname(ws.store.path)], STALE_TEMPORARY_S, of=ws.store.path)
    sweep_retired(ws)
    return warnings


def sweep_retired(ws: Workspace) -> None:
    """Retired folders older than the retention: no reader planned before their table changed is left."""
    for note_id, folder in ws.pending.expired(ws.retention_s()):
        try:
            ws.files.delete(folder)
            ws.pending.end(note_id)
        except (MaterializedTableError, *SPARK_ERRORS, OSError) as error:
            log.warning("Deleting the retired folder %s: %s", folder, spark_message(error))
