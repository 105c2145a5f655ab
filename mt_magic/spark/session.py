"""Which kind of session this is, what it runs on, and a local session for the demo, tests and CLI."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession


def is_connect(spark: Any) -> bool:
    """A Spark Connect session: no JVM in this process, everything goes over gRPC."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def is_session(candidate: Any) -> bool:
    """A SparkSession of either kind (Connect sessions do not subclass the classic one)."""
    return isinstance(candidate, SparkSession) or (
        is_connect(candidate) and type(candidate).__name__ == "SparkSession")


def active_session() -> Any | None:
    """The thread's active session: a classic one, else a Connect one."""
    session = SparkSession.getActiveSession()
    if session is None and os.environ.get("SPARK_CONNECT_MODE_ENABLED"):
        from pyspark.sql.connect.session import SparkSession as ConnectSession
        session = ConnectSession.getActiveSession()
    return session


@dataclass(frozen=True)
class SessionInfo:
    """Where statements run: shown to the user and stored in refresh handlers."""

    master: str
    application_id: str
    connect: bool

    @property
    def text(self) -> str:
        kind = "Spark Connect, " if self.connect else ""
        return f"{kind}{self.master}, {self.application_id}"


def session_info(spark: Any) -> SessionInfo:
    conf = spark.conf
    return SessionInfo(conf.get("spark.master", "unknown"), conf.get("spark.app.id", "unknown"),
                       is_connect(spark))


_QUIET_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
}


REMOTE_ENV = "MT_MAGIC_SPARK_REMOTE"


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
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quiet_query_logs(spark)
    return spark


def _connect_session(remote: str, app_name: str, conf: dict[str, str]) -> Any:
    """`remote("local[N]")` starts the server in this process's JVM with the confs given (static
    ones too); a running server keeps its own static confs."""
    import warnings

    builder = SparkSession.builder.remote(remote).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():   # the client cannot re-set the static confs it just passed on
        warnings.simplefilter("ignore", UserWarning)
        spark = builder.getOrCreate()
    from pyspark import SparkContext
    server = SparkContext._active_spark_context    # a local server runs in this process's JVM
    if server is not None:
        server.setLogLevel("ERROR")
        _quiet(server._jvm, "org.apache.spark.sql.connect.utils.ErrorUtils")
        _quiet(server._jvm, "SQLQueryContextLogger")
    return spark


def quiet_query_logs(spark: Any) -> None:
    """Spark logs every failed query at ERROR with its plan; user errors are reported by us instead."""
    if not is_connect(spark):
        _quiet(spark._jvm, "SQLQueryContextLogger")


def _quiet(jvm: Any, logger: str) -> None:
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, jvm.org.apache.logging.log4j.Level.OFF)


_QUERY_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def silence_client_logs() -> None:
    """PySpark logs every failed query as JSON on stderr, py4j its bridge: in a notebook such lines
    land in whatever cell runs, and mt_magic reports the user's errors itself."""
    from pyspark.logger import PySparkLogger
    logging.getLogger("py4j").addHandler(logging.NullHandler())
    for name in _QUERY_ERROR_LOGGERS:
        PySparkLogger.getLogger(name).disabled = True


def restore_client_logs() -> None:
    for name in _QUERY_ERROR_LOGGERS:
        logging.getLogger(name).disabled = False
