"""The TinyDB catalog store: records round-trip, writers in threads and processes never clobber."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mt_magic import MaterializedTableError
from mt_magic.catalog.handlers import JobHandler, ScheduleHandler
from mt_magic.catalog.history import RefreshHistory
from mt_magic.catalog.lease import Lease
from mt_magic.catalog.mailbox import Mailbox
from mt_magic.catalog.model import Column, MaterializedTable, PartitionLocation, RefreshOutcome, Storage
from mt_magic.catalog.layout import LAYOUT
from mt_magic.catalog.pending import PendingWrites
from mt_magic.catalog.store import CatalogStore


def record(name: str = "t", **changes) -> MaterializedTable:
    table = MaterializedTable(
        catalog="spark_catalog", database="db", name=name,
        columns=(Column("ds", "string", True, None, "string"), Column("n", "bigint", False, "count", "long")),
        query_columns=("ds", "n"), definition_query="SELECT ...", original_query="SELECT ...",
        freshness="1 HOUR", logical_refresh_mode="AUTOMATIC", refresh_mode="FULL",
        refresh_status="ACTIVATED",
        storage=Storage("/data/t", "parquet", "", (PartitionLocation({"ds": "2024-01-01"}, "/data/t/v1"),)),
        primary_key={"name": "PK_n", "columns": ["n"]}, partition_keys=("ds",), options={"k": "v"},
        refresh_handler=ScheduleHandler("quartz_job_x", "group", "spark_catalog.db.t", "0 0 0/1 * * ? *", "UTC",
                                        dynamic_options={"compression": "gzip"}), source_tables=("spark_catalog.db.s",),
        last_refresh=RefreshOutcome("2024-01-01T00:00:00", 1.5, "SUCCEEDED", 3, {"ds": "2024-01-01"}))
    return table.evolve(**changes) if changes else table


def test_round_trip(tmp_path):
    store = CatalogStore(str(tmp_path / "catalog.json"))
    table = record()
    store.put(table)
    assert store.get("spark_catalog.db.t") == table
    assert [t.identifier for t in store.list()] == ["spark_catalog.db.t"]
    assert store.retire("spark_catalog.db.t") == table
    assert store.get("spark_catalog.db.t") is None and store.list() == []
    assert store.dropping() == [table]
    store.forget("spark_catalog.db.t")
    assert store.dropping() == [] and store.retire("spark_catalog.db.t") is None


def test_a_new_record_replaces_a_retired_one_whole(tmp_path):
    """CREATE after a DROP that did not finish: the new record is not taken for the dropping one,
    and finishing the old DROP leaves it alone."""
    store = CatalogStore(str(tmp_path / "catalog.json"))
    store.put(record())
    store.retire("spark_catalog.db.t")
    fresh = record(options={})
    store.put(fresh)
    assert store.get("spark_catalog.db.t") == fresh and store.dropping() == []
    store.forget("spark_catalog.db.t")
    assert store.get("spark_catalog.db.t") == fresh


def test_refresh_handlers_keep_their_kind(tmp_path):
    store = CatalogStore(str(tmp_path / "catalog.json"))
    job = JobHandler("q-1", "r-1", "job", "/cp", "complete", "/data/t/v2", 5.0, "local[2]", "app-1",
                     restarts=2, failure="boom")
    for handler in (job, None):
        store.put(record(refresh_handler=handler))
        assert store.get("spark_catalog.db.t").refresh_handler == handler
    document = record().to_document()
    assert document["refresh_handler"]["kind"] == "embedded-scheduler"
    # a record written before handlers were typed: a plain dict with its kind and extra keys
    document["refresh_handler"] = {"kind": "streaming-query", "streaming_query_id": "q-0", "restarts": 1,
                                   "checkpoint_location": "/cp", "retired_key": "x"}
    loaded = MaterializedTable.from_document(document)
    assert loaded.job == JobHandler(streaming_query_id="q-0", checkpoint_location="/cp", restarts=1)
    assert loaded.dynamic_options == {}


def test_another_instance_sees_writes_at_once(tmp_path):
    """No query cache: a second store object (another kernel) reads the file every time."""
    path = str(tmp_path / "catalog.json")
    first, second = CatalogStore(path), CatalogStore(path)
    assert second.get("spark_catalog.db.t") is None
    first.put(record())
    assert second.get("spark_catalog.db.t") is not None
    second.update("spark_catalog.db.t", lambda t: t.evolve(refresh_status="SUSPENDED"))
    assert first.get("spark_catalog.db.t").refresh_status == "SUSPENDED"


def test_schema_version_is_written_and_checked(tmp_path):
    path = tmp_path / "catalog.json"
    CatalogStore(str(path))
    data = json.loads(path.read_text())
    assert data == {"meta": {"1": {"schema_version": LAYOUT}}}
    data["meta"]["1"]["schema_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(MaterializedTableError, match="written by a newer mt_magic"):
        CatalogStore(str(path))


def _bump(store: CatalogStore, times: int) -> None:
    for _ in range(times):
        store.update("spark_catalog.db.t", lambda t: t.evolve(options={"n": str(int(t.options["n"]) + 1)}))


def _bump_in_process(path: str, times: int) -> None:
    _bump(CatalogStore(path), times)


def test_concurrent_updates_from_threads_and_processes_are_all_kept(tmp_path):
    path = str(tmp_path / "catalog.json")
    store = CatalogStore(path)
    store.put(record(options={"n": "0"}))
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_bump_in_process, args=(path, 30)) for _ in range(2)]
    threads = [threading.Thread(target=_bump, args=(store, 30)) for _ in range(2)]
    for worker in processes + threads:
        worker.start()
    for worker in processes + threads:
        worker.join(120)
    assert all(p.exitcode == 0 for p in processes)
    assert store.get("spark_catalog.db.t").options["n"] == "120"
    assert not list(tmp_path.glob("**/*.tmp"))


def _bump_tables(path: str, names: list[str], times: int) -> None:
    store = CatalogStore(path)
    for _ in range(times):
        for name in names:
            store.update(f"spark_catalog.db.{name}",
                         lambda t: t.evolve(options={"n": str(int(t.options["n"]) + 1)}))


def test_processes_writing_different_tables_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "catalog.json")
    store = CatalogStore(path)
    for name in "abcd":
        store.put(record(name, options={"n": "0"}))
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_bump_tables, args=(path, names, 25)) for names in (["a", "b"], ["c"])]
    for process in processes:
        process.start()
    _bump_tables(path, ["d"], 25)
    for process in processes:
        process.join(120)
    assert all(p.exitcode == 0 for p in processes)
    assert {t.name: t.options["n"] for t in store.list()} == {"a": "25", "b": "25", "c": "25", "d": "25"}


_WRITER = """
import sys
from mt_magic.catalog.store import CatalogStore
store = CatalogStore(sys.argv[1])
print("writing", flush=True)
n = 0
while True:
    n += 1
    store.update("spark_catalog.db.busy", lambda t: t.evolve(options={"n": str(n)}, comment="x" * (n % 5000)))
"""


def test_a_sigkill_during_one_tables_write_leaves_every_other_record_intact(tmp_path):
    path = str(tmp_path / "catalog.json")
    store = CatalogStore(path)
    others = [record(f"t{n}", options={"n": str(n)}) for n in range(20)]
    for table in others + [record("busy", options={"n": "0"})]:
        store.put(table)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for delay in (0.05, 0.2, 0.5):
        worker = subprocess.Popen([sys.executable, "-c", _WRITER, path], env=env, stdout=subprocess.PIPE, text=True)
        assert worker.stdout.readline().strip() == "writing"
        time.sleep(delay)         # mid-loop: the kill lands in a read, a write or a rename
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
        reopened = CatalogStore(path)
        assert [t for t in reopened.list() if t.name != "busy"] == sorted(others, key=lambda t: t.identifier)
        busy = reopened.get("spark_catalog.db.busy")
        assert busy is not None and int(busy.options["n"]) > 0      # its last whole write


def test_a_store_of_the_first_layout_moves_to_a_file_per_table_losing_nothing(tmp_path):
    """tests/data/catalog_v1.json was written by mt_magic before this layout (two tables, one of them
    SUSPENDED, and one whose DROP had not finished)."""
    legacy = json.loads(open(os.path.join(os.path.dirname(__file__), "data", "catalog_v1.json")).read())
    expected = {d["identifier"]: MaterializedTable.from_document(
        {k: v for k, v in d.items() if k not in ("identifier", "dropping")})
        for d in legacy["materialized_tables"].values()}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(legacy))
    # a kill while the records move (after the first is written): the next open moves them again
    code = ("import os, signal, sys\n"
            "real, calls = os.replace, []\n"
            "def replace(*a):\n"
            "    calls.append(a)\n"
            "    if len(calls) == 2: os.kill(os.getpid(), signal.SIGKILL)\n"
            "    real(*a)\n"
            "os.replace = replace\n"
            "from mt_magic.catalog.store import CatalogStore\n"
            "CatalogStore(sys.argv[1])\n")
    killed = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert killed.returncode == -signal.SIGKILL and "materialized_tables" in json.loads(path.read_text())
    store = CatalogStore(str(path))
    assert {t.identifier: t for t in store.list()} == {
        i: t for i, t in expected.items() if i != "spark_catalog.default.gone"}
    assert store.dropping() == [expected["spark_catalog.default.gone"]]
    assert store.get("spark_catalog.default.flat").refresh_status == "SUSPENDED"
    assert json.loads(path.read_text()) == {"meta": {"1": {"schema_version": LAYOUT}}}
    assert CatalogStore(str(path)).list() == store.list()       # opened again: nothing moves twice


def test_two_stores_in_one_folder_keep_their_own_tables(tmp_path):
    dev, prod = CatalogStore(str(tmp_path / "dev.json")), CatalogStore(str(tmp_path / "prod.json"))
    dev.put(record("dev_t"))
    prod.put(record("prod_t"))
    assert [t.name for t in dev.list()] == ["dev_t"] and [t.name for t in prod.list()] == ["prod_t"]
    assert prod.retire("spark_catalog.db.dev_t") is None            # not prod's to drop
    assert [t.name for t in CatalogStore(str(tmp_path / "dev.json")).list()] == ["dev_t"]
    assert Lease(dev.path).path != Lease(prod.path).path
    assert Mailbox(dev.path).folder != Mailbox(prod.path).folder


def _layout_2_store(folder, name: str, tables: list[MaterializedTable]) -> str:
    """A store as mt_magic wrote it before stores had folders of their own: records, history and notes
    beside the store file, in folders every store of that folder shared."""
    path = folder / name
    path.write_text(json.dumps({"meta": {"1": {"schema_version": 2}}}))
    for table in tables:
        document = {**table.to_document(), "identifier": table.identifier}
        records = folder / "tables"
        records.mkdir(exist_ok=True)
        digest = hashlib.sha1(table.identifier.encode()).hexdigest()
        (records / f"{digest[:24]}.json").write_text(json.dumps({"record": {"1": document}}))
        (folder / "history").mkdir(exist_ok=True)
        (folder / "history" / f"{digest[:24]}.jsonl").write_text(
            json.dumps({"table": table.identifier, "finished": "2024-01-01T00:00:00", "outcome": "SUCCEEDED"})
            + "\n")
    (folder / ".pending").mkdir(exist_ok=True)
    (folder / ".pending" / "retired-1.json").write_text(json.dumps({"folder": "/x", "retired_at": 1.0}))
    return str(path)


def test_a_lone_store_of_the_shared_layout_moves_into_its_folder_losing_nothing(tmp_path):
    tables = [record("a"), record("b", refresh_status="SUSPENDED")]
    path = _layout_2_store(tmp_path, "catalog.json", tables)
    (tmp_path / "notes.json").write_text(json.dumps({"not": "a store"}))        # a user's file beside it
    store = CatalogStore(path)
    assert store.list() == tables and store.warnings == []
    assert not (tmp_path / "tables").exists() and not (tmp_path / "history").exists()
    assert [e["table"] for e in RefreshHistory(path).entries()] == ["spark_catalog.db.a", "spark_catalog.db.b"]
    assert PendingWrites(path).expired(0) == [("retired-1", "/x")]
    assert json.loads((tmp_path / "catalog.json").read_text()) == {"meta": {"1": {"schema_version": LAYOUT}}}
    assert CatalogStore(path).list() == tables                       # opened again: nothing moves twice


def test_stores_that_shared_a_folder_say_which_tables_they_cannot_attribute(tmp_path):
    tables = [record("dev_t"), record("prod_t")]
    dev = _layout_2_store(tmp_path, "dev.json", tables)
    prod = _layout_2_store(tmp_path, "prod.json", [])
    for path in (dev, prod):
        store = CatalogStore(path)
        assert store.list() == []                                    # neither takes the other's tables
        assert len(store.warnings) == 1 and "spark_catalog.db.dev_t, spark_catalog.db.prod_t could not be " \
            "attributed" in store.warnings[0] and "mt-magic adopt" in store.warnings[0]
    adopted = subprocess.run([sys.executable, "-m", "mt_magic", "adopt", "--store", prod, "prod_t"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert adopted.returncode == 0 and "spark_catalog.db.prod_t" in adopted.stdout, adopted.stderr
    assert CatalogStore(prod).list() == [tables[1]]
    assert [e["table"] for e in RefreshHistory(prod).entries()] == ["spark_catalog.db.prod_t"]
    again = subprocess.run([sys.executable, "-m", "mt_magic", "adopt", "--store", dev, "prod_t"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert again.returncode == 2 and "prod_t: no unattributed table of that name" in again.stderr
    assert "Traceback" not in again.stderr
    dev_store = CatalogStore(dev)
    assert "spark_catalog.db.dev_t could not be attributed" in dev_store.warnings[0]
    assert dev_store.adopt(["dev_t"]) == ["spark_catalog.db.dev_t"] and dev_store.list() == [tables[0]]
    assert CatalogStore(dev).warnings == []


def test_names_list_every_table_but_a_dropping_one(tmp_path):
    """SHOW's listing, read from the stored documents without parsing the records (at a thousand
    tables parsing them cost more than the statement may: benchmarks/catalog_scale.py)."""
    store = CatalogStore(str(tmp_path / "catalog.json"))
    for name in ("b", "a", "gone"):
        store.put(record(name))
    store.retire("spark_catalog.db.gone")
    assert store.names() == [("spark_catalog", "db", "a"), ("spark_catalog", "db", "b")]
    assert CatalogStore(str(tmp_path / "catalog.json")).names() == store.names()
