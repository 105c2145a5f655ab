"""%%mtsql and %mtsql: parse the magic's arguments and hand the statements to the kernel's Gateway."""

from __future__ import annotations

import logging
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display
from traitlets import Bool, Dict, Integer, Unicode, observe, validate

from mt_magic.errors import MaterializedTableError, ValidationError
from mt_magic.gateway import Gateway
from mt_magic.notebook.completion import Completer, register, unregister
from mt_magic.notebook.dashboard import Dashboards, run_for_dashboard
from mt_magic.notebook.display import ResultView
from mt_magic.notebook.progress import progress_observer
from mt_magic.notebook.status import owner_text
from mt_magic.sql.placeholders import substitution
from mt_magic.spark.jobs import JOB_OBSERVER
from mt_magic.spark.kind import is_session
from mt_magic.spark.sessions import active_session, restore_client_logs, session_info, silence_client_logs
from mt_magic.sql.parser import Cell, parse_cell
from mt_magic.sql.statements import CreateMaterializedTable

_STATE_KEY = "_mt_magic_magics"
DIAGNOSTIC_PAYLOAD = "mt_magic.diagnostic"      # an execute reply's payload: where a %%mtsql cell's error lies
_QUIET_LOGGERS = ("mt_magic", "apscheduler")


class VerboseError(Exception):
    """--verbose: a plain exception, so IPython prints the whole chain down to the user error."""


@magics_class
class MtMagics(Magics):
    """Dispatch only: parsing, validation and execution live in the Gateway."""

    catalog_store = Unicode(None, allow_none=True, config=True, help=(
        "The catalog store file (TinyDB JSON). Default: $MT_MAGIC_CATALOG_STORE, else "
        "./.mt_magic/catalog.json. Changing it closes the kernel's gateway; the next statement "
        "opens the new store."))
    display_limit = Integer(100, config=True, help="Rows shown of a result; the rest are cut with a note.")
    default_options = Dict(default_value={}, config=True, help=(
        "Gateway options every statement starts from, e.g. "
        "{'materialized-table.full.initialize': 'on-schedule'}; SET overrides them for the session."))
    show_dashboard = Bool(False, config=True, help="Show the dashboard after each CREATE MATERIALIZED TABLE.")
    verbose_errors = Bool(False, config=True, help="Full Python tracebacks for user errors in every cell.")
    dashboard_interval = Integer(1, config=True, help="Seconds between live dashboard updates.")
    progress_after = Integer(1, config=True, help="Seconds a refresh runs before its progress bar shows.")

    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.gateway: Gateway | None = None
        self.dashboards: Dashboards | None = None
        self.completer: Completer | None = None      # Tab in %%mtsql cells, registered by `load`

    @validate("display_limit")
    def _positive_limit(self, proposal):
        if proposal["value"] < 1:
            raise ValueError("MtMagics.display_limit must be at least 1")
        return proposal["value"]

    @observe("catalog_store", "default_options")
    def _gateway_settings_changed(self, change) -> None:
        if self.gateway is not None:
            self.close()
            print(f"mt_magic: MtMagics.{change['name']} changed; the next statement opens a new gateway.")

    # ------------------------------------------------------------ gateway
    def _gateway(self, spark_name: str | None) -> Gateway:
        if self.gateway is not None and spark_name and self.gateway.spark is not self._spark(spark_name):
            self.close()
        if self.gateway is None:
            spark = self._spark(spark_name)
            self.gateway = Gateway(spark, catalog_store=self.catalog_store, config=self.default_options)
            self.dashboards = Dashboards(self.gateway, run_for_dashboard(self.gateway.execute),
                                         self.dashboard_interval)
            origin = f"notebook variable '{spark_name or 'spark'}'" if self._named(spark_name) else \
                "the active SparkSession"
            print(f"mt_magic: using {origin} ({session_info(spark).text}); "
                  f"catalog store {self.gateway.store.path}, {owner_text(self.gateway.owner())}")
            for warning in self.gateway.restore_warnings:
                print(f"mt_magic: {warning}")
        return self.gateway

    def session_for_completion(self) -> Any | None:
        """The session statements would use, never one made for Tab (None when there is none yet)."""
        return self.gateway.spark if self.gateway is not None else self._named(None) or active_session()

    def _named(self, spark_name: str | None):
        candidate = self.shell.user_ns.get(spark_name or "spark")
        return candidate if is_session(candidate) else None

    def _spark(self, spark_name: str | None):
        session = self._named(spark_name)
        if session is not None:
            return session
        if spark_name:
            raise ValidationError(f"--spark {spark_name}: there is no SparkSession in a notebook variable "
                                  f"named '{spark_name}'.")
        session = active_session()
        if session is None:
            raise ValidationError("No SparkSession found: create one first, e.g. "
                                  "spark = SparkSession.builder.getOrCreate()")
        return session

    # -------------------------------------------------------------- magic
    @magic_arguments()
    @argument("-o", "--out", metavar="NAME", help="store the result in the notebook variable NAME")
    @argument("--dry-run", action="store_true",
              help="parse and validate (Spark analyses the queries); create, change and run nothing")
    @argument("--verbose", action="store_true", help="show the full Python traceback of an error")
    @argument("--spark", metavar="NAME",
              help="use the SparkSession in notebook variable NAME (default: 'spark', else the active one)")
    @no_var_expand
    @line_cell_magic
    def mtsql(self, line: str, cell: str | None = None):
        """Run materialized-table statements, and any Spark SQL, separated by ';'.

        %%mtsql [flags]       the cell holds the statements
        %mtsql [flags] SQL    one-liners: %mtsql SHOW MATERIALIZED TABLES
        %mtsql dashboard [NAME]   the live dashboard, of all tables or one in detail

        Statements (as in Apache Flink):
          CREATE [OR ALTER] MATERIALIZED TABLE name [(columns, PRIMARY KEY, WATERMARK)]
              [COMMENT '...'] [PARTITIONED BY (cols)] [WITH ('key' = 'value', ...)]
              [FRESHNESS = INTERVAL 'n' unit] [REFRESH_MODE = FULL | CONTINUOUS] AS query
          ALTER MATERIALIZED TABLE name SUSPEND | RESUME [WITH (...)]
              | REFRESH [PARTITION (k = 'v', ...)] | BACKFILL FROM 'start' TO 'end' | AS query
              | SET FRESHNESS = INTERVAL ... | SET REFRESH_MODE = ... | SET (...) | RESET (...)
          DROP MATERIALIZED TABLE [IF EXISTS] name
          SHOW MATERIALIZED TABLES [FROM db] [[NOT] LIKE 'pattern']
          SHOW CREATE MATERIALIZED TABLE name;  DESCRIBE [EXTENDED] name
          EXPLAIN ALTER MATERIALIZED TABLE name REFRESH [PARTITION (...)];  EXPLAIN CREATE ...
          CREATE [OR REPLACE] TABLE name [...] AS query;  SET 'key' = 'value';  RESET ['key']
          anything else goes to spark.sql unchanged.

        Notebook variables: {{name}} becomes the variable's value as a quoted SQL literal
        (None becomes NULL); IPython's {var} and $var expansion is not applied.
        A trailing ';' on the last line silences the output. Settings: %config MtMagics.
        """
        if cell is None:
            flags, sql = _split_line(line, self.mtsql.parser)
        else:
            flags, sql = line, cell
        args = parse_argstring(self.mtsql, flags)
        verbose = args.verbose or self.verbose_errors
        try:
            return self._dispatch(args, sql)
        except MaterializedTableError as error:
            if cell is not None:
                self._point_at(error)
            if verbose:
                raise VerboseError(str(error)) from error
            raise

    def _dispatch(self, args, sql: str):
        gateway = self._gateway(args.spark)
        words = sql.split()
        if words and words[0].lower() == "dashboard":
            return self._dashboard(words[1:])
        read = substitution(sql, self.shell.user_ns)
        try:
            return self._run(gateway, args, parse_cell(read.text))
        except MaterializedTableError as error:
            if error.where is not None:     # told in the text the user wrote
                error.where = read.placed(error.where)
            raise

    def _run(self, gateway: Gateway, args, cell: Cell):
        if not cell.text.strip():
            return None
        token = JOB_OBSERVER.set(self._progress())
        try:
            results = gateway.run(cell, dry_run=args.dry_run)
        finally:
            JOB_OBSERVER.reset(token)
            self.dashboards.sync()
        view = ResultView(results, self.display_limit) if results else None
        if args.out and view is not None:
            self.shell.user_ns[args.out] = view
        if self.show_dashboard and not args.dry_run and \
                any(isinstance(s, CreateMaterializedTable) for s in cell.statements):
            display(view)
            return None if cell.silenced else self.dashboards.open()
        return None if cell.silenced else view

    def _dashboard(self, words: list[str]):
        if len(words) > 1:
            raise ValidationError("Usage: %mtsql dashboard [NAME]")
        identifier = self.gateway.describe(words[0])["identifier"] if words else None
        return self.dashboards.open(identifier)

    def _point_at(self, error: MaterializedTableError) -> None:
        """A front end that knows the payload (the package's JupyterLab extension) underlines the
        place of the error in the cell; others ignore it and show the error's text alone."""
        if error.where is not None and getattr(self.shell, "kernel", None) is not None:
            line, column = error.where
            self.shell.payload_manager.write_payload({
                "source": DIAGNOSTIC_PAYLOAD, "line": line + 1, "column": column,     # below the %%mtsql line
                "message": f"{type(error).__name__}: {error.summary}"})

    def _progress(self):
        """Progress bars only where a front end can draw widgets: a kernel, not a terminal."""
        if getattr(self.shell, "kernel", None) is None:
            return None
        return progress_observer(display, after_s=self.progress_after)

    def close(self) -> None:
        if self.dashboards is not None:
            self.dashboards.close()
            self.dashboards = None
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None


def _split_line(line: str, parser) -> tuple[str, str]:
    """Leading flags, then the SQL verbatim (quotes and all): '-o r SELECT 1' -> ('-o r', 'SELECT 1')."""
    rest, flags = line.strip(), []
    while rest.startswith("-") and not rest.startswith("-- ") and rest != "--":
        word, _, rest = rest.partition(" ")
        flags.append(word)
        action = parser._option_string_actions.get(word)
        if action is not None and action.nargs is None:      # a flag with a value: -o NAME
            value, _, rest = rest.lstrip().partition(" ")
            flags.append(value)
        rest = rest.lstrip()
    return " ".join(flags), rest


# IPython's magic_arguments starts the help with reST's '::'; `%%mtsql?` shows it as it is.
MtMagics.mtsql.__doc__ = MtMagics.mtsql.__doc__.removeprefix("::\n\n")

_NULL_HANDLER = logging.NullHandler()


def load(shell) -> None:
    """One MtMagics (so one Gateway) per shell; loading again is harmless."""
    if _STATE_KEY in shell.__dict__:
        return
    for name in _QUIET_LOGGERS:     # no library log line may land in whatever cell runs
        logging.getLogger(name).addHandler(_NULL_HANDLER)
    silence_client_logs()
    magics = MtMagics(shell=shell)
    shell.register_magics(magics)
    magics.completer = register(shell, lambda: magics.gateway, magics.session_for_completion)
    shell.__dict__[_STATE_KEY] = magics


def unload(shell) -> None:
    """Stop the scheduler, the streaming jobs and the dashboards; forget the magic, lazy one too."""
    magics = shell.__dict__.pop(_STATE_KEY, None)
    if magics is None:
        return
    magics.close()
    unregister(shell, magics.completer)
    restore_client_logs()
    for name in _QUIET_LOGGERS:     # other packages' loggers are left as they were
        logging.getLogger(name).removeHandler(_NULL_HANDLER)
    for kind in ("cell", "line"):
        shell.magics_manager.magics[kind].pop("mtsql", None)
    shell.magics_manager.lazy_magics.pop("mtsql", None)
    shell.configurables = [c for c in shell.configurables if c is not magics]
