"""Flink-style materialized tables for PySpark notebooks."""

from __future__ import annotations

import logging

from mt_magic.errors import (ExecutionError, MaterializedTableError, ParseError, SparkError,
                             StateError, TableNotFoundError, ValidationError)
from mt_magic.gateway import Gateway
from mt_magic.results import Result
from mt_magic.save_as import save_as
from mt_magic.sql.parser import parse

__version__ = "0.1.0"

# A library's log lines reach only the handlers its application sets up (the service logs them):
# never Python's last-resort handler, which prints into whatever notebook cell runs.
for _logger in ("mt_magic", "apscheduler"):
    logging.getLogger(_logger).addHandler(logging.NullHandler())

__all__ = ["Gateway", "MaterializedTableError", "ParseError", "ValidationError", "StateError",
           "TableNotFoundError", "ExecutionError", "SparkError", "Result", "parse", "save_as", "__version__",
           "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(shell) -> None:
    from mt_magic.notebook.magic import load
    load(shell)


def unload_ipython_extension(shell) -> None:
    from mt_magic.notebook.magic import unload
    unload(shell)
