"""The plan step: every statement is validated here, once, into a Plan.

`execute` applies the plan; `--dry-run` reports its summary. Both go through the same validation, so
they cannot disagree: whatever would make a statement fail before it changes anything fails here.
The statements' families plan in their own modules: definitions, operations, session.
"""

from __future__ import annotations

from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.plans.definitions import Definitions
from mt_magic.manager.plans.operations import Operations
from mt_magic.manager.plans.plan import Plan
from mt_magic.manager.plans.session_statements import SessionStatements
from mt_magic.manager.workspace import Workspace
from mt_magic.sql import statements as st


class Planner:
    def __init__(self, ws: Workspace, pipelines: Pipelines, lifecycle: Lifecycle) -> None:
        definitions = Definitions(ws, pipelines, lifecycle)
        self._planners = {**definitions.planners(),
                          **Operations(ws, pipelines, lifecycle, definitions.creating).planners(),
                          **SessionStatements(ws, pipelines, lifecycle).planners()}

    def plan(self, statement: st.Statement) -> Plan:
        return self._planners[type(statement)](statement)
