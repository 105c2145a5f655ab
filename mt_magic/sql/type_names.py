"""Declared column types as Flink spells them, spelled as Spark's DDL reads them."""

from __future__ import annotations

import re

_FLINK_TYPES = [
    (re.compile(r"\bTIMESTAMP_LTZ\s*(\(\s*\d+\s*\))?", re.I), "TIMESTAMP"),
    (re.compile(r"\bTIMESTAMP\s*\(\s*\d+\s*\)\s+WITH\s+LOCAL\s+TIME\s+ZONE", re.I), "TIMESTAMP"),
    (re.compile(r"\bTIMESTAMP\s*(\(\s*\d+\s*\))?\s+WITHOUT\s+TIME\s+ZONE", re.I), "TIMESTAMP_NTZ"),
    (re.compile(r"\bTIMESTAMP\s*\(\s*\d+\s*\)", re.I), "TIMESTAMP"),
    (re.compile(r"\b(VAR)?CHAR\s*\(\s*\d+\s*\)", re.I), "STRING"),
    (re.compile(r"\b(VAR)?BINARY\s*\(\s*\d+\s*\)|\bBYTES\b", re.I), "BINARY"),
]


def spark_spelling(declared: str) -> str:
    """TIMESTAMP_LTZ, TIMESTAMP(p) WITH[OUT] (LOCAL) TIME ZONE, (VAR)CHAR(n), (VAR)BINARY(n) and BYTES
    as the Spark types they hold; the rest as written."""
    for pattern, replacement in _FLINK_TYPES:
        declared = pattern.sub(replacement, declared)
    return declared
