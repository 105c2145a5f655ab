"""Which kind of session this is, what it runs on, and a local session for the demo, tests and CLI."""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from mt_magic.catalog.lease import process_alive
from mt_magic.spark.kind import is_connect
from mt_magic.spark.warehouse import adopt_leftover_tables

log = logging.getLogger(__name__)


def active_session() -> Any | None:
    """The thread's active session: in a Spark Connect client process the Connect one (a local
    server's classic session may live in the same process), else the classic one."""
    if os.environ.get("SPARK_CONNECT_MODE_ENABLED"):
        from pyspark.sql.connect.session import SparkSession as ConnectSession
        session = ConnectSession.getActiveSession()
        if session is not None:
            return session
    return SparkSession.getActiveSession()


@dataclass(frozen=True)
class SessionInfo:
    """Where statements run: shown to the user and stored in refresh handlers."""

    master: str
    application_id: str
    connect: bool
    # Spark keeps tables' file listings between statements (its relation cache): a write from another
    # application shows only after REFRESH TABLE. A server mt_magic starts keeps none.
    keeps_listings: bool = True

    @property
    def text(self) -> str:
        kind = "Spark Connect, " if self.connect else ""
        return f"{kind}{self.master}, {self.application_id}"


def conf_value(spark: Any, key: str) -> str | None:
    """A Spark conf of the session, or None where it is unset."""
    return spark.conf.get(key, None)


def session_info(spark: Any) -> SessionInfo:
    """Asked once per session (over Connect each conf is a round trip; neither changes)."""
    try:
        return _INFO[spark]
    except (KeyError, TypeError):
        pass
    conf = spark.conf
    info = SessionInfo(conf.get("spark.master", "unknown"), conf.get("spark.app.id", "unknown"),
                       is_connect(spark), conf.get(RELATION_CACHE_SIZE, None) != "0")
    try:
        _INFO[spark] = info
    except TypeError:      # a session that cannot be weakly referenced is asked each time
        pass
    return info


RELATION_CACHE_SIZE = "spark.sql.filesourceTableRelationCacheSize"
_INFO: weakref.WeakKeyDictionary[Any, SessionInfo] = weakref.WeakKeyDictionary()


# The sessions started here run without Spark's UI, yet Spark writes every statement's physical plan
# out for it (at the start, and again at each adaptive re-plan): in its plainest form, the text nobody
# reads costs least (a refresh is a few statements; their planning and this text are most of a small
# one: the tests of the refresh decision 7 % less time alone). An event log, where a user enables one,
# shows the plain tree.
_QUIET_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ui.explainMode": "simple",
}


REMOTE_ENV = "MT_MAGIC_SPARK_REMOTE"
LOG_ENV = "MT_MAGIC_SPARK_LOG"


def spark_log_path() -> str:
    """Where the JVM of a local session writes its own output (banner, warnings, Python workers'
    lines): MT_MAGIC_SPARK_LOG, else a file per process in the temporary folder. Those of processes
    that have ended go then: one per kernel would pile up."""
    if os.environ.get(LOG_ENV):
        return os.environ[LOG_ENV]
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "mt_magic-spark-*.log")):
        pid = os.path.basename(path).removeprefix("mt_magic-spark-").removesuffix(".log")
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            with suppress(OSError):      # another process sweeping too
                os.unlink(path)
    return os.path.join(tempfile.gettempdir(), f"mt_magic-spark-{os.getpid()}.log")


def local_session(app_name: str = "mt_magic", warehouse: str | None = None, remote: str | None = None) -> Any:
    """A local session, quiet and small, with FAIR scheduling so a notebook's own queries are not
    queued behind refreshes.

    With `remote` (or MT_MAGIC_SPARK_REMOTE) it is a Spark Connect client instead: 'local[2]' starts a
    local Connect server, 'sc://host:port' reaches a running one.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = dict(_QUIET_CONF, **{"spark.ui.enabled": "false"})
    if warehouse:
        conf["spark.sql.warehouse.dir"] = warehouse
    remote = remote or os.environ.get(REMOTE_ENV)
    if remote:
        return _connect_session(remote, app_name, conf)
    return _classic_session("local[2]", app_name, conf)


def service_session(master: str | None, remote: str | None, conf: Mapping[str, str],
                    connect_port: int | None = None) -> Any:
    """The refresh service's session: classic on any master (local, spark://, yarn, k8s), or a
    Connect client of a cluster's server (`remote`). With `connect_port` its application also serves
    Spark Connect on localhost, so notebooks share its catalog and see every publish at once."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {**_QUIET_CONF, "spark.ui.enabled": "false", **conf}
    if remote:
        return _connect_session(remote, "mt_magic-service", settings)
    return _classic_session(master or "local[*]", "mt_magic-service", settings, connect_port)


def _classic_session(master: str, app_name: str, conf: Mapping[str, str], connect_port: int | None = None) -> Any:
    """A classic session; with `connect_port`, one that serves Spark Connect there too. Its sessions
    then read table locations from the catalog each time (no per-session relation cache), so one
    session's publish is what every other session reads next.

    Its Python workers (UDFs, a Connect client's foreachBatch) run this interpreter unless
    PYSPARK_PYTHON says otherwise: a kernel in a virtual environment needs no setting. The JVM's own
    output goes to `spark_log_path()`, not this process's stdout and stderr: a notebook shows those in
    whatever cell runs, and a service's log holds its own lines only (a failing query's task errors
    and Java stacks, in log4j's format, made it two logs in one). A new
    application on Spark's in-memory catalog (a notebook's, a service's) registers again the managed
    tables a previous run left in its warehouse (spark/warehouse.py): its sources are there again."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(conf)
    if connect_port is not None:
        settings = {"spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
                    "spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(connect_port),
                    RELATION_CACHE_SIZE: "0", **conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    started = SparkSession.getActiveSession() is None and SparkContext._active_spark_context is None
    _launch_quietly(settings)
    spark = builder.getOrCreate()
    # Only a new application has a catalog that forgot (a second call returns the same session).
    if started and spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "in-memory":
        adopted = adopt_leftover_tables(spark)   # what the previous run's catalog forgot (a restart)
        if adopted:
            log.info("Registered again the %d tables the warehouse %s kept (Spark's in-memory catalog "
                     "forgot them): %s", len(adopted), spark.conf.get("spark.sql.warehouse.dir"),
                     ", ".join(adopted))
    spark.sparkContext.setLogLevel("ERROR")
    loggers = ["SQLQueryContextLogger"]
    if connect_port is not None:
        loggers.append("org.apache.spark.sql.connect.utils.ErrorUtils")
    for logger in loggers:
        _quiet(spark._jvm, logger)
    return spark


def _launch_quietly(settings: Mapping[str, str]) -> None:
    """Start this process's JVM (if none runs yet) with its output in the log file."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    with open(spark_log_path(), "ab") as log_file:     # the JVM keeps its own descriptor
        SparkContext._ensure_initialized(
            gateway=launch_gateway(conf, popen_kwargs={"stdout": log_file, "stderr": log_file}))


def _connect_session(remote: str, app_name: str, conf: dict[str, str]) -> Any:
    """A Spark Connect client. For 'local[N]' the server is a classic session of this process that
    serves Connect on a free port (as PySpark's own local mode does, but never on a taken port)."""
    import warnings

    from pyspark.sql.connect.session import SparkSession as ConnectSession
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)   # inherited from a parent client process
    if remote.startswith("local"):
        port = _free_port()
        _classic_session(remote, app_name, conf, port)
        remote = f"sc://127.0.0.1:{port}"
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"    # PySpark's own mark of a Connect client process
    client = ConnectSession.builder.remote(remote)
    for key, value in conf.items():
        client = client.config(key, value)
    with warnings.catch_warnings():   # a running server keeps its static confs, and says so
        warnings.simplefilter("ignore", UserWarning)
        return client.getOrCreate()


@contextmanager
def session_conf(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Session settings for one call (a query started inside keeps them: Spark clones the session's
    settings into each stream), then the session's own again."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def default_parallelism(spark: Any) -> int:
    """The cores the application has (a small stream's shuffle partitions): the SparkContext's on a
    classic session; over Connect the server's setting, or its local master's cores, else 4."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    known = _connect_parallelism.get(spark)
    if known is None:       # two round trips: asked once per session (a refresh's change asks each time)
        configured = spark.conf.get("spark.default.parallelism", None)
        local = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", spark.conf.get("spark.master", "") or "")
        known = _connect_parallelism[spark] = max(1, int(configured)) if configured else \
            int(local.group(1)) if local else 4
    return known


_connect_parallelism: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def quiet_background_output(spark: Any) -> None:
    """Spark's console progress bar (one per application, drawing every job's stages) and the
    streaming engine's warnings go to the driver's stderr, which a notebook shows in whatever cell
    runs: where pipelines run in a notebook's own application, they are turned off (the dashboard
    and the history say what runs). So is Hadoop's warning, with its Java stack, when a stream stopped
    by SUSPEND is interrupted while its checkpoint file's permissions are set by a `chmod` it waits
    for (the write goes on). So is a broadcast's ERROR record when the thread writing it is interrupted
    (a stopping stream's, which Spark interrupts wherever it is; one CI run showed it): the record
    says no more than the failure Spark raises to whoever broadcast, which reports it — or, for a
    stream being stopped, ignores it. Over Connect the server's stderr is not the notebook's."""
    if is_connect(spark):
        return
    bar = spark.sparkContext._jsc.sc().progressBar()
    if bar.isDefined():
        bar.get().stop()
    for logger in _BACKGROUND_LOGGERS:
        spark._jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            logger, spark._jvm.org.apache.logging.log4j.Level.ERROR)
    _quiet(spark._jvm, "org.apache.spark.broadcast.TorrentBroadcast")


_BACKGROUND_LOGGERS = ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.streaming",
                      "org.apache.hadoop.util.Shell")


def _free_port() -> int:
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _quiet(jvm: Any, logger: str) -> None:
    """A logger off whose records reach the user another way: Spark logs every failed query at ERROR
    with its plan (user errors are reported by us instead), a failed broadcast before raising it."""
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, jvm.org.apache.logging.log4j.Level.OFF)


_QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def keep_query_errors_in_spark_log() -> None:
    """PySpark logs every failed query as JSON, with Java's whole stack, on stderr, once per error it
    converts: an error mt_magic reports itself (raised, in the history, in a service's log line) would
    show twice and in Java's words. Those records go to this process's Spark log (`spark_log_path()`),
    beside the JVM's own lines, in scripts, services and notebooks alike."""
    from pyspark.logger import PySparkLogger
    for name in _QUERY_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        if any(getattr(h, "mt_magic", False) for h in logger.handlers):
            continue
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:      # PySpark's own, to stderr
                logger.removeHandler(handler)
                _MOVED_HANDLERS.append((logger, handler))
        to_file = logging.FileHandler(spark_log_path(), delay=True)
        to_file.mt_magic = True         # type: ignore[attr-defined]
        logger.addHandler(to_file)


_MOVED_HANDLERS: list[tuple[logging.Logger, logging.Handler]] = []


def silence_client_logs() -> None:
    """In a notebook no library line may land in whatever cell runs: py4j's bridge says nothing, and
    PySpark's records of failed queries go to the Spark log."""
    logging.getLogger("py4j").addHandler(_NULL_HANDLER)
    keep_query_errors_in_spark_log()


def quiet_library_logs() -> None:
    """A service logs its own lines at INFO; PySpark's bridge and client only their warnings."""
    for name in ("py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.WARNING)


_NULL_HANDLER = logging.NullHandler()


def restore_client_logs() -> None:
    logging.getLogger("py4j").removeHandler(_NULL_HANDLER)
    for name in _QUERY_ERROR_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if getattr(h, "mt_magic", False)]:
            logger.removeHandler(handler)
            handler.close()
    while _MOVED_HANDLERS:
        logger, handler = _MOVED_HANDLERS.pop()
        logger.addHandler(handler)
