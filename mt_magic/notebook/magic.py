"""%%mtsql: runs a cell through the kernel's Gateway and shows the last result."""

from __future__ import annotations

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from mt_magic.errors import MaterializedTableError
from mt_magic.gateway import Gateway
from mt_magic.notebook.display import ResultView

_STATE_KEY = "_mt_magic_gateway"


@magics_class
class MtMagics(Magics):
    """Dispatch only: parsing and execution live in the Gateway."""

    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.gateway: Gateway | None = None

    def _gateway(self) -> Gateway:
        if self.gateway is None:
            self.gateway = Gateway(self._spark())
            print(f"mt_magic: using SparkSession {self.gateway.spark.sparkContext.applicationId}, "
                  f"catalog store {self.gateway.store.path}")
            for warning in self.gateway.restore_warnings:
                print(f"mt_magic: {warning}")
        return self.gateway

    def _spark(self):
        from pyspark.sql import SparkSession
        candidate = self.shell.user_ns.get("spark")
        if isinstance(candidate, SparkSession):
            return candidate
        session = SparkSession.getActiveSession()
        if session is None:
            raise MaterializedTableError("No SparkSession found: create one first, e.g. "
                                         "spark = SparkSession.builder.getOrCreate()")
        return session

    def _run(self, sql: str):
        results = self._gateway().execute(sql)
        return ResultView(results[-1]) if results else None

    @cell_magic
    def mtsql(self, line: str, cell: str):
        """Run materialized-table statements (and any Spark SQL) separated by ';'."""
        return self._run(cell)

    @line_magic("mtsql")
    def mtsql_line(self, line: str):
        """One statement on the line: %mtsql SHOW MATERIALIZED TABLES"""
        return self._run(line)

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None


def load(shell) -> None:
    if _STATE_KEY in shell.__dict__:
        return
    magics = MtMagics(shell)
    shell.register_magics(magics)
    shell.__dict__[_STATE_KEY] = magics


def unload(shell) -> None:
    magics = shell.__dict__.pop(_STATE_KEY, None)
    if magics is None:
        return
    magics.close()
    for kind in ("cell", "line"):
        shell.magics_manager.magics[kind].pop("mtsql", None)
