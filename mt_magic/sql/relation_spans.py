"""Where a query names tables: relation positions and the scopes of its WITH names.

Pure syntax over our tokens. Spark's parser decides *which* names are relations (the analyzer
compares); this module says *where* names stand in relation position, and where a CTE name means
the CTE rather than a table of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass

from mt_magic.sql.tokens import Kind, Token, tokenize

# Words after which a FROM clause's commas no longer separate relations.
_FROM_ENDS = ("WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "WINDOW", "UNION", "EXCEPT", "INTERSECT",
              "MINUS", "SELECT", "QUALIFY", "CLUSTER", "DISTRIBUTE", "SORT", "OFFSET", "PIVOT", "UNPIVOT",
              "LATERAL")
# Words that start something else where a relation name could stand.
_NOT_NAMES = ("SELECT", "VALUES", "LATERAL", "WITH", "FROM", "TABLE", "STREAM")


@dataclass(frozen=True)
class NameRef:
    parts: tuple[str, ...]
    start: int          # offset of the first character
    stop: int           # offset of the last character (inclusive, as Spark's origins)

    def key(self) -> tuple[str, ...]:
        return tuple(p.lower() for p in self.parts)


def name_at(tokens: list[Token], index: int) -> tuple[NameRef, int] | None:
    """The dotted name starting at tokens[index], and the index after it."""
    parts: list[Token] = []
    i = index
    while i < len(tokens) and tokens[i].kind in (Kind.WORD, Kind.QUOTED):
        parts.append(tokens[i])
        i += 1
        if i + 1 < len(tokens) and tokens[i].is_symbol(".") and tokens[i + 1].kind in (Kind.WORD, Kind.QUOTED):
            i += 1
            continue
        break
    if not parts or (parts[0].kind is Kind.WORD and parts[0].value.upper() in _NOT_NAMES):
        return None
    return NameRef(tuple(t.value for t in parts), parts[0].start, parts[-1].end - 1), i


def relation_positions(text: str) -> list[NameRef]:
    """Names in relation position: after FROM, JOIN or TABLE, or after a comma of a FROM clause.

    A name followed by '(' is a table-valued function, not a relation.
    """
    tokens = tokenize(text)
    in_from = [False]
    found: list[NameRef] = []
    for index, token in enumerate(tokens):
        starts_relation = False
        if token.is_symbol("("):
            in_from.append(False)
        elif token.is_symbol(")"):
            if len(in_from) > 1:
                in_from.pop()
        elif token.is_word("FROM"):
            in_from[-1] = True
            starts_relation = True
        elif token.is_word("JOIN", "TABLE"):
            starts_relation = True
        elif token.is_symbol(","):
            starts_relation = in_from[-1]
        elif token.is_word(*_FROM_ENDS):
            in_from[-1] = False
        if not starts_relation:
            continue
        named = name_at(tokens, index + 1)
        if named is not None and not (named[1] < len(tokens) and tokens[named[1]].is_symbol("(")):
            found.append(named[0])
    return found


def cte_scopes(text: str) -> list[tuple[str, int, int]]:
    """(name, first, last offset) where a WITH clause's name refers to its CTE: from the end of
    its own definition to the end of the enclosing parentheses (or the text)."""
    tokens = tokenize(text)
    closing = _closing_parens(tokens)
    scopes: list[tuple[str, int, int]] = []
    for index, token in enumerate(tokens):
        if token.is_word("WITH"):
            end = _enclosing_end(tokens, index, closing, len(text))
            definitions, _, _ = _with_clause(tokens, index, closing)
            scopes.extend((name.lower(), tokens[body_end].end, end) for name, body_end in definitions)
    return scopes


def _with_clause(tokens: list[Token], index: int,
                 closing: dict[int, int]) -> tuple[list[tuple[str, int]], int, bool]:
    """The WITH clause at tokens[index]: each CTE's name and the index of its body's ')', the index
    after the clause, and whether every name had its `AS (…)`."""
    definitions: list[tuple[str, int]] = []
    i = index + 1 + (1 if index + 1 < len(tokens) and tokens[index + 1].is_word("RECURSIVE") else 0)
    while i < len(tokens) and tokens[i].kind in (Kind.WORD, Kind.QUOTED):
        name = tokens[i].value
        i += 1
        if i < len(tokens) and tokens[i].is_symbol("("):          # column names
            i = closing.get(i, len(tokens) - 1) + 1
        if not (i + 1 < len(tokens) and tokens[i].is_word("AS") and tokens[i + 1].is_symbol("(")):
            return definitions, i, False
        body_end = closing.get(i + 1, len(tokens) - 1)
        definitions.append((name, body_end))
        i = body_end + 1
        if not (i < len(tokens) and tokens[i].is_symbol(",")):
            break
        i += 1
    return definitions, i, True


def in_cte_scope(ref: NameRef, scopes: list[tuple[str, int, int]]) -> bool:
    return len(ref.parts) == 1 and any(name == ref.parts[0].lower() and first <= ref.start <= last
                                       for name, first, last in scopes)


def _closing_parens(tokens: list[Token]) -> dict[int, int]:
    """Index of each '(' -> index of its ')'."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for index, token in enumerate(tokens):
        if token.is_symbol("("):
            stack.append(index)
        elif token.is_symbol(")") and stack:
            pairs[stack.pop()] = index
    return pairs


def _enclosing_end(tokens: list[Token], index: int, closing: dict[int, int], text_end: int) -> int:
    """The offset where the parentheses around tokens[index] close (or the end of the text)."""
    enclosing = [open_ for open_, close in closing.items() if open_ < index < close]
    return tokens[closing[max(enclosing)]].start if enclosing else text_end


_QUERY_STARTS = ("SELECT", "VALUES", "FROM", "TABLE")


def is_query(text: str) -> bool:
    """The text is a query (after any WITH clause: SELECT, VALUES, FROM, TABLE or a parenthesis),
    so Spark can analyse it without running anything."""
    tokens = tokenize(text)
    i = 0
    if tokens and tokens[0].is_word("WITH"):
        _, i, complete = _with_clause(tokens, 0, _closing_parens(tokens))
        if not complete:
            return False
    if not (i < len(tokens) and (tokens[i].is_word(*_QUERY_STARTS) or tokens[i].is_symbol("("))):
        return False
    depth = 0
    for token in tokens[i:]:      # Hive's FROM t INSERT … writes
        depth += token.is_symbol("(") - token.is_symbol(")")
        if depth == 0 and token.is_word("INSERT"):
            return False
    return True


# Statements that write a table, and the words before the table's name.
_WRITES = (("INSERT", "INTO", "TABLE"), ("INSERT", "OVERWRITE", "TABLE"), ("INSERT", "INTO"),
           ("INSERT", "OVERWRITE"), ("TRUNCATE", "TABLE"), ("ALTER", "TABLE"), ("DELETE", "FROM"),
           ("UPDATE",), ("MERGE", "INTO"))


def written_table(text: str) -> tuple[str, NameRef, str] | None:
    """The table a Spark statement writes or alters: (its leading words, the name, the word after
    the name), or None for statements that write no table."""
    tokens = tokenize(text)
    for words in _WRITES:
        if len(tokens) > len(words) and all(t.is_word(w) for t, w in zip(tokens, words)):
            found = name_at(tokens, len(words))
            if found is not None:
                ref, after = found
                return " ".join(words), ref, tokens[after].value.upper() if after < len(tokens) else ""
    return None
