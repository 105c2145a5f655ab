"""The source tables a query reads, each place it reads one (an occurrence), and the query with those
places read from other relations: the old files of a source, its new files, or only the appended ones."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

DIALECT = "spark"


class Version(Enum):
    """Which files of a source an occurrence reads."""

    OLD = "old"          # the files the published result was computed from
    NEW = "new"          # the files now: old plus appended
    DELTA = "delta"      # only the appended files


# An occurrence's index and the version it reads → the name of the relation standing in for it.
Names = Callable[[int, Version], str]


class Unparsable(Exception):
    """sqlglot cannot read the query: it is recomputed (Spark, which accepted it, stays the judge)."""


def parse(query: str) -> exp.Expression:
    try:
        return sqlglot.parse_one(query, read=DIALECT)
    except SqlglotError as error:
        raise Unparsable(str(error).splitlines()[0]) from None


def identifier(table: exp.Table) -> str:
    """catalog.database.name as the catalog record spells sources (lower case)."""
    return ".".join(part.name for part in table.parts).lower()


def tables(tree: exp.Expression) -> list[exp.Table]:
    """The table references of a query, in reading order (the order of occurrences)."""
    return list(tree.find_all(exp.Table))


def replaced(tree: exp.Expression, reading: Callable[[int], str]) -> exp.Expression:
    """A copy of `tree` where occurrence i reads the relation `reading(i)`. An occurrence without an
    alias gets its table's name as one, so that columns qualified by the table name still resolve."""
    copy = tree.copy()
    for index, table in enumerate(tables(copy)):
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        relation = exp.to_table(reading(index), dialect=DIALECT)
        relation.set("alias", alias)
        table.replace(relation)
    return copy


def sql(tree: exp.Expression) -> str:
    return tree.sql(dialect=DIALECT)
