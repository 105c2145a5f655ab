"""Functions whose answer changes while the data does not (time, randomness): a query calling one
cannot be skipped because its sources are unchanged."""

from __future__ import annotations

from mt_magic.sql.tokens import Kind, tokenize

VOLATILE_FUNCTIONS = frozenset({
    "current_date", "current_timestamp", "curdate", "now", "localtimestamp", "unix_timestamp",
    "rand", "randn", "random", "randstr", "uniform", "uuid", "shuffle", "monotonically_increasing_id",
})


def volatile_calls(query: str) -> list[str]:
    """The volatile functions a query names (with or without parentheses, as Spark allows)."""
    return sorted({t.value.lower() for t in tokenize(query)
                   if t.kind is Kind.WORD and t.value.lower() in VOLATILE_FUNCTIONS})


def volatile_note(query: str) -> str | None:
    """What a user must know of a table whose query calls one, said where they look (CREATE's result,
    EXPLAIN; DESCRIBE's change detection says it too)."""
    calls = volatile_calls(query)
    if not calls:
        return None
    return (f"its query calls {', '.join(c.upper() for c in calls)}: the table can never equal a new run of "
            "its query, and every refresh recomputes it")
