"""`mt-magic serve` keeps a catalog store's tables fresh with no notebook open; `mt-magic status`
shows who owns a store and how fresh each table is, and `mt-magic adopt` moves tables that stores of
an earlier layout shared into the store they belong to (both read files only, no Spark)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from mt_magic import config as cfg
from mt_magic.catalog.handlers import ScheduleHandler
from mt_magic.catalog.history import RefreshHistory, matched_at
from mt_magic.catalog.lease import Lease, OwnerKind
from mt_magic.catalog.model import ACTIVATED, MaterializedTable
from mt_magic.catalog.store import CatalogStore
from mt_magic.errors import MaterializedTableError
from mt_magic.gateway import Gateway
from mt_magic.refresh.scheduler import next_fire
from mt_magic.sql.zones import zone_named
from mt_magic.spark.sessions import quiet_library_logs, service_session, session_info, spark_log_path
from mt_magic.sql.freshness import CONTINUOUS, IntervalFreshness

log = logging.getLogger("mt_magic.service")

# --conf keys that are gateway options; every other key is a Spark conf.
_OPTION_PREFIXES = ("materialized-table.", "execution.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mt-magic", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="own a catalog store and keep every ACTIVATED table fresh")
    store_help = f"the catalog store file (default: ${cfg.CATALOG_STORE_ENV}, else {cfg.DEFAULT_CATALOG_STORE})"
    serve.add_argument("--store", help=store_help)
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--master", help="Spark master of the service's own application (default local[*]): "
                                        "local[N], spark://host:port, yarn, k8s://...")
    where.add_argument("--remote", help="run as a Spark Connect client of sc://host:port instead")
    serve.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark conf, or a materialized-table.* / execution.* option (repeatable)")
    serve.add_argument("--connect-port", type=int, metavar="N",
                       help="the service's application also serves Spark Connect on localhost:N")
    status = commands.add_parser("status", help="the owner of a catalog store and every table's freshness")
    status.add_argument("--store", help=store_help)
    adopt = commands.add_parser("adopt", help="move tables that stores of an earlier layout shared into one store")
    adopt.add_argument("--store", help=store_help.replace("file", "file the tables belong to", 1))
    adopt.add_argument("tables", nargs="+", metavar="TABLE", help="a table's name (its identifier's last parts)")
    args = parser.parse_args(argv)
    commands_run = {"serve": _serve, "status": _status, "adopt": _adopt}
    try:
        return commands_run[args.command](args)
    except MaterializedTableError as error:
        print(f"mt-magic {args.command}: {error}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------- serve
def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    quiet_library_logs()
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    settings = dict(_key_value(item) for item in args.conf)
    options = {k: v for k, v in settings.items() if k.startswith(_OPTION_PREFIXES)}
    spark_conf = {k: v for k, v in settings.items() if k not in options}
    if args.remote and args.connect_port:
        raise MaterializedTableError("--connect-port serves the service's own application; with --remote "
                                     "the notebooks connect to that server instead.")
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    store = os.path.abspath(cfg.catalog_store_path(args.store))
    spark_conf[cfg.CATALOG_STORE_CONF] = store        # the Connect clients' Gateway(spark) finds it
    spark = service_session(args.master, args.remote, spark_conf, args.connect_port)
    try:
        gateway = Gateway(spark, catalog_store=store, config=options, kind=OwnerKind.SERVICE)
        info = session_info(spark)
        served = f"; Spark Connect on sc://localhost:{args.connect_port}" if args.connect_port else ""
        jvm = "" if args.remote else f"; Spark's own log: {spark_log_path()}"
        log.info("Serving %s as its owner (%s)%s%s", gateway.store.path, info.text, served, jvm)
        for warning in gateway.restore_warnings:
            log.warning("%s", warning)
        stop.wait()
        log.info("Stopping: streaming jobs stop at a checkpoint")
        gateway.close()
        log.info("Stopped")
    finally:
        spark.stop()
    return 0


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise MaterializedTableError(f"--conf {item!r}: write KEY=VALUE.")
    return key.strip(), value


# ---------------------------------------------------------------- status
def _status(args: argparse.Namespace) -> int:
    path = cfg.catalog_store_path(args.store)
    if not os.path.isfile(path):
        raise MaterializedTableError(f"There is no catalog store at {path}.")
    store, lease, history = CatalogStore(path), Lease(path), RefreshHistory(path)
    holder = lease.holder()
    live = holder is not None and not holder.released_at and holder.alive()
    if holder is None:
        print("Owner: none (the next Gateway or `mt-magic serve` on this store takes it)")
    else:
        state = "handed over" if holder.released_at else "alive" if live else "dead"
        print(f"Owner: {holder.text}, {state}, heartbeat {time.time() - holder.heartbeat:.1f} s ago")
    rows = [("table", "mode", "status", "last refresh", "next refresh", "data age / freshness")]
    now = datetime.now(timezone.utc)
    for table in store.list():
        entries = history.entries(table.identifier, limit=50)
        last = entries[0] if entries else None
        status = str(table.refresh_status) + (f" ({table.suspend_reason})" if table.suspend_reason else "")
        rows.append((table.identifier, str(table.refresh_mode), status,
                     _last_text(last), _next_text(table, now), _age_text(table, matched_at(table.published_at, entries), now, watched=live)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _adopt(args: argparse.Namespace) -> int:
    path = cfg.catalog_store_path(args.store)
    if not os.path.isfile(path):
        raise MaterializedTableError(f"There is no catalog store at {path}.")
    for identifier in CatalogStore(path).adopt(args.tables):
        print(f"{identifier}: now in {path}")
    return 0


def _last_text(entry: dict | None) -> str:
    if entry is None:
        return "-"
    started, finished = datetime.fromisoformat(entry["started"]), datetime.fromisoformat(entry["finished"])
    return (f"{started.strftime('%Y-%m-%d %H:%M:%S')} {entry['outcome']} "
            f"{(finished - started).total_seconds():.1f} s ({entry['trigger']})")


def _next_text(table: MaterializedTable, now: datetime) -> str:
    handler = table.refresh_handler
    if table.refresh_status != ACTIVATED or not isinstance(handler, ScheduleHandler):
        return "continuous" if table.refresh_status == ACTIVATED else "-"
    moment = next_fire(IntervalFreshness.parse(table.freshness), zone_named(handler.time_zone), now)
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z") if moment else "-"


def _age_text(table: MaterializedTable, matched: datetime | None, now: datetime, watched: bool) -> str:
    """The data's age: since the table last matched its sources (a skip proves it). An ACTIVATED
    CONTINUOUS table that a live owner watches is not stale for want of new rows: its job looks at
    the sources at every trigger, and no refresh is written when they did not change (a failing one
    is retried, then suspended)."""
    if matched is None:
        return f"- / {table.freshness}"
    age = now - matched
    idle = watched and table.refresh_mode == CONTINUOUS and table.refresh_status == ACTIVATED
    stale = " STALE" if age > IntervalFreshness.parse(table.freshness).duration and not idle else ""
    return f"{age.total_seconds():.0f} s / {table.freshness}{stale}"
