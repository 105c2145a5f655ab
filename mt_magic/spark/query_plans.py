"""Spark's plans of a DataFrame read as text: what a query became, whatever its text says."""

from __future__ import annotations

import re
from typing import Any

from mt_magic.spark.errors import spark_call
from mt_magic.spark.kind import is_connect

ANALYZED = "== Analyzed Logical Plan =="
_OPERATOR = re.compile(r"^[\s:|+-]*([A-Z][A-Za-z]*)(?: ([A-Z][A-Za-z]*))?", re.M)


def physical_plan(frame: Any) -> str:
    """Spark's physical plan of a DataFrame, as EXPLAIN prints it (nothing runs)."""
    return spark_call(lambda: frame._explain_string(mode="simple") if is_connect(frame.sparkSession)
                      else frame._jdf.queryExecution().executedPlan().toString(), "Spark")


def analysed_operators(frame: Any, outside: str | None = None) -> set[str]:
    """The operators of a DataFrame's analysed plan ('Aggregate', 'Join Inner', ...): what Spark
    made of a query, whatever its text says — not those of its subquery expressions (a scalar
    subquery's, an EXISTS's: the rules hold their tables still). `outside`: not those under the
    relation of that name."""
    if is_connect(frame.sparkSession):
        text = spark_call(lambda: frame._explain_string(extended=True), "The query is not valid")
        text = text.split(ANALYZED, 1)[-1].split("== Optimized Logical Plan ==", 1)[0]
    else:
        text = spark_call(lambda: frame._jdf.queryExecution().analyzed().treeString(), "The query is not valid")
    text = _without_subqueries(text)
    if outside is not None:
        text = _pruned(text, outside)
    found = set()
    for match in _OPERATOR.finditer(text):
        found.add(match.group(1))
        if match.group(1) == "Join" and match.group(2):
            found.add(f"Join {match.group(2)}")
    return found


def _without_subqueries(tree: str) -> str:
    """A plan's text without its subquery expressions' plans: Spark prints those two levels below the
    operator holding them, its children one level below (each level three characters of tree marks)."""
    kept: list[str] = []
    parents: list[int] = []
    under: int | None = None
    for line in tree.splitlines():
        depth = (len(line) - len(line.lstrip(" :|+-"))) // 3
        if under is not None and depth > under:
            continue
        under = None
        while parents and parents[-1] >= depth:
            parents.pop()
        if parents and depth > parents[-1] + 1:
            under = depth
            continue
        parents.append(depth)
        kept.append(line)
    return "\n".join(kept)


def _pruned(tree: str, alias: str) -> str:
    """A plan's text without the subtrees of the relations named `alias` (each line's depth is its
    prefix of tree marks, three characters a level)."""
    kept: list[str] = []
    under: int | None = None
    for line in tree.splitlines():
        depth = len(line) - len(line.lstrip(" :|+-"))
        if under is not None and depth > under:
            continue
        under = depth if line[depth:] == f"SubqueryAlias {alias}" else None
        if under is None:
            kept.append(line)
    return "\n".join(kept)
