"""The words a %%mtsql cell shows as keywords: Spark SQL's (its `sql_keywords()`) and those of our
statement grammar (the upper-case words the parser reads). `python labextension/keywords.py` writes
them to src/keywords.json; a test checks that the file holds them all."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GRAMMAR = [HERE.parent / "mt_magic" / "sql" / name for name in ("parser.py", "freshness.py")]
WRITTEN = HERE / "src" / "keywords.json"


def grammar_words() -> set[str]:
    words = set()
    for module in GRAMMAR:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"[A-Z][A-Z_]+(?: [A-Z][A-Z_]+)*", node.value):
                words.update(node.value.split())
    return words


def keywords(spark) -> list[str]:
    return sorted(grammar_words() | {row[0].upper() for row in spark.sql("SELECT keyword FROM sql_keywords()").collect()})


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    from mt_magic.session import local_session
    WRITTEN.write_text(json.dumps(keywords(local_session()), indent=0) + "\n")
