"""Run by test_kill: a new owner of the store refreshes an aggregate incrementally and SIGKILLs itself at
one point of it (argv[5]): after its version was begun; after data and state were written in it (a state
in the data's files), or after its state was written and after it joined the new version (a state of
its own); after the partials kept per source partition were moved into it (argv[6] "partitioned": the
source is partitioned by day, and a day was rewritten; "below": joined with a dimension, the partials kept
below the join; "chain": over a materialized table that retracted a day, the partials kept by its file),
or — a filter's rows kept by day (argv[6]
"linear") — as its written files are moved up out of their day's folder; after the version was published, or after the
manifest naming the new state was written."""

import os
import re
import signal
import sys

from mt_magic import Gateway
from mt_magic.session import local_session
from mt_magic.spark.files import files_for
from mt_magic.storage.manifests import Manifests
from mt_magic.storage.versions import TableStorage

store, source, warehouse, database, point, layout = sys.argv[1:7]
spark = local_session("mt_magic-kill-incremental", warehouse=warehouse)
spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
if layout in ("partitioned", "linear", "below", "chain"):
    spark.sql(f"CREATE TABLE {database}.src (k INT, amount DOUBLE, ds STRING) USING parquet PARTITIONED BY (ds) "
              f"LOCATION '{source}'")
    spark.sql(f"ALTER TABLE {database}.src RECOVER PARTITIONS")
    if layout == "below":
        spark.sql(f"CREATE TABLE {database}.dm (k INT, region STRING) USING parquet LOCATION '{source}_dim'")
else:
    spark.sql(f"CREATE TABLE {database}.src (k INT, amount DOUBLE) USING parquet LOCATION '{source}'")
gateway = Gateway(spark, catalog_store=store)


def die() -> None:
    print("killed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def after(cls, name: str, when=lambda *args: True) -> None:
    """SIGKILL right after `cls.name` returns, when `when(*args)` holds."""
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if when(*args):
            die()
        return result
    setattr(cls, name, wrapped)


versions = []
if point == "begun":                 # the data's version begun (noted), nothing written in it yet
    after(TableStorage, "new_version")
elif point == "written":             # data and state written in the new version, not yet published
    after(type(files_for(spark)), "mkdirs", lambda path: path.rstrip("/").rsplit("/", 1)[-1].startswith("v-"))
elif point == "state-written":       # the merged state written; the data's version not yet begun
    after(TableStorage, "new_version", lambda *args: versions.append(1) or len(versions) == 2)
elif point == "state-moved":         # the state moved into the new version, not yet published
    after(type(files_for(spark)), "rename", lambda source_path, target: target.endswith("/_state"))
elif point == "partials-moved":      # the partials kept per day moved into the new version, not yet published
    after(type(files_for(spark)), "rename", lambda source_path, target: "/_provenance/" in target)
elif point == "flattened":           # a filter's files written by day, being moved up, not yet published
    after(type(files_for(spark)), "rename", lambda source_path, target: re.match(r"\d{5}-", target.rsplit("/", 1)[1]))
elif point == "published":           # readers see the new version; the record still names the old
    after(TableStorage, "publish")
elif point == "manifest":            # the manifest of the new state written; the record not yet
    after(Manifests, "write")
print("refreshing", flush=True)
gateway.execute(f"ALTER MATERIALIZED TABLE {database}.mt REFRESH")
print("finished", flush=True)
