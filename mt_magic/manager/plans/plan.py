"""A validated statement (a Plan), and the families of statements that plan one each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mt_magic.manager.lifecycle import Lifecycle
from mt_magic.manager.pipelines import Pipelines
from mt_magic.manager.workspace import Workspace
from mt_magic.results import Result


@dataclass(frozen=True)
class Plan:
    """A validated statement: what it would do, and doing it."""

    summary: Callable[[], str]
    apply: Callable[[], Result]


def make_plan(summary: str, apply: Callable[[], Result]) -> Plan:
    return Plan(lambda: summary, apply)


class Family:
    """The plans of one family of statements, from what every plan needs."""

    def __init__(self, ws: Workspace, pipelines: Pipelines, lifecycle: Lifecycle) -> None:
        self.ws = ws
        self.pipelines = pipelines
        self.lifecycle = lifecycle

    def planners(self) -> dict[type, Callable[[Any], Plan]]:
        """Statement type → the method that plans it."""
        raise NotImplementedError
