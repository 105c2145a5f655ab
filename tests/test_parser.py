"""The statement grammar: every statement kind, and errors that name line, column and expectation."""

from __future__ import annotations

import pytest

from mt_magic import ParseError, ValidationError, parse
from mt_magic.sql import statements as st


def one(text: str) -> st.Statement:
    (statement,) = parse(text)
    return statement


def test_create_with_every_clause():
    statement = one("""CREATE MATERIALIZED TABLE cat.db.mt (
        a INT NOT NULL COMMENT 'the key',
        b DECIMAL(10, 2),
        c AS a + 1,
        m TIMESTAMP(3) METADATA FROM 'timestamp',
        WATERMARK FOR m AS m - INTERVAL '5' SECOND,
        CONSTRAINT pk PRIMARY KEY (a) NOT ENFORCED)
      COMMENT 'sales'
      PARTITIONED BY (ds, hr)
      WITH ('format' = 'json', 'partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
      FRESHNESS = INTERVAL '3' MINUTES
      REFRESH_MODE = FULL
      AS SELECT a, b FROM t""")
    assert isinstance(statement, st.CreateMaterializedTable)
    assert statement.name.parts == ("cat", "db", "mt")
    assert [c.name for c in statement.columns] == ["a", "b", "c", "m"]
    assert statement.columns[0].not_null and statement.columns[0].comment == "the key"
    assert statement.columns[1].type == "DECIMAL(10, 2)"
    assert statement.columns[2].computed == "a + 1"
    assert statement.columns[3].metadata and statement.columns[3].metadata_key == "timestamp"
    assert statement.watermark == st.Watermark("m", "m - INTERVAL '5' SECOND")
    assert statement.primary_key == st.PrimaryKey("pk", ("a",))
    assert statement.comment == "sales"
    assert statement.partition_keys == ("ds", "hr")
    assert statement.options == {"format": "json", "partition.fields.ds.date-formatter": "yyyy-MM-dd"}
    assert (statement.freshness.value, statement.freshness.unit) == ("3", "MINUTES")
    assert statement.refresh_mode == "FULL"
    assert statement.query == "SELECT a, b FROM t"
    assert not statement.names_only


def test_name_only_column_list_and_constraint_only_part():
    statement = one("CREATE MATERIALIZED TABLE t (b, a) AS SELECT a, b FROM s")
    assert statement.names_only and [c.name for c in statement.columns] == ["b", "a"]
    statement = one("CREATE MATERIALIZED TABLE t (PRIMARY KEY (a) NOT ENFORCED) AS SELECT a FROM s")
    assert statement.columns == () and statement.primary_key == st.PrimaryKey(None, ("a",))


def test_nested_types_and_column_primary_key():
    statement = one("CREATE MATERIALIZED TABLE t (a MAP<STRING, ARRAY<INT>> NOT NULL PRIMARY KEY NOT ENFORCED, "
                    "b STRUCT<x: INT, y: ARRAY<STRING>>) AS SELECT 1")
    assert statement.columns[0].type == "MAP<STRING, ARRAY<INT>>" and statement.columns[0].primary_key
    assert statement.columns[1].type == "STRUCT<x: INT, y: ARRAY<STRING>>"


def test_query_is_kept_verbatim_with_comments_and_case():
    text = "CREATE MATERIALIZED TABLE t AS\n  select A -- keep me\n  FROM s\n"
    assert one(text).query == "select A -- keep me\n  FROM s"


def test_several_statements_with_comments_and_quoted_semicolons():
    statements = parse("""-- a comment; with a semicolon
        SELECT ';' AS x;  /* ; */
        ALTER MATERIALIZED TABLE t SUSPEND;;
        SET 'k' = 'v;w'""")
    assert [type(s) for s in statements] == [st.SparkStatement, st.AlterSuspend, st.SetOption]
    assert statements[0].text == "SELECT ';' AS x"
    assert statements[2].value == "v;w"


@pytest.mark.parametrize("text", [
    "SELECT 1", "CREATE TABLE x (a INT) USING parquet", "INSERT INTO t VALUES (1)",
    "CREATE TEMPORARY VIEW v AS SELECT 1", "DESCRIBE QUERY SELECT 1", "DESCRIBE t a",
    "SET spark.sql.shuffle.partitions=4", "SHOW TABLES", "DROP TABLE t PURGE",
    "CREATE TABLE materialised (a INT) USING parquet", "CREATE VIEW materialised_v AS SELECT 1",
])
def test_other_statements_go_to_spark_untouched(text):
    statement = one(text)
    assert isinstance(statement, st.SparkStatement) and statement.text == text


def test_alter_variants():
    assert isinstance(one("ALTER MATERIALIZED TABLE t SUSPEND"), st.AlterSuspend)
    assert one("ALTER MATERIALIZED TABLE t RESUME WITH ('sink.parallelism' = '10')").options == {
        "sink.parallelism": "10"}
    assert one("ALTER MATERIALIZED TABLE t RESUME").options == {}
    assert one("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = '2024-06-28', n = 2023)").partition == {
        "ds": "2024-06-28", "n": "2023"}
    assert one("ALTER MATERIALIZED TABLE t REFRESH").partition == {}
    assert one("ALTER MATERIALIZED TABLE t AS SELECT 1 AS a").query == "SELECT 1 AS a"
    freshness = one("ALTER MATERIALIZED TABLE t SET FRESHNESS = INTERVAL '1' DAYS").freshness
    assert (freshness.value, freshness.unit) == ("1", "DAYS")
    assert one("ALTER MATERIALIZED TABLE t SET REFRESH_MODE = CONTINUOUS").refresh_mode == "CONTINUOUS"
    assert one("ALTER MATERIALIZED TABLE t SET ('a' = '1', 'a' = '2')").options == {"a": "2"}
    assert one("ALTER MATERIALIZED TABLE t RESET ('a', 'b', 'a')").keys == ("a", "b")
    assert one("ALTER MATERIALIZED TABLE t SET ()").options == {}


def test_drop_show_describe_set_reset():
    drop = one("DROP MATERIALIZED TABLE IF EXISTS db.t")
    assert isinstance(drop, st.DropMaterializedTable) and drop.if_exists
    show = one("SHOW MATERIALIZED TABLES FROM cat.db NOT LIKE 'a%'")
    assert show.database.parts == ("cat", "db") and show.pattern == "a%" and show.negate
    assert one("SHOW MATERIALIZED TABLES").database is None
    assert one("SHOW CREATE MATERIALIZED TABLE t").name.parts == ("t",)
    describe = one("DESCRIBE EXTENDED `my db`.t")
    assert isinstance(describe, st.DescribeTable) and describe.extended
    assert describe.name.parts == ("my db", "t")
    assert one("RESET 'k'").key == "k" and one("RESET").key is None
    assert isinstance(one("DROP TABLE IF EXISTS t"), st.DropTable)


def test_string_literals_unescape():
    statement = one(r"ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = 'x\' OR ''1''=''1')")
    assert statement.partition == {"ds": "x' OR '1'='1"}


def error_of(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text)
    return info.value


def test_parse_error_names_line_column_and_expectation():
    error = error_of("SELECT 1;\nALTER MATERIALIZED TABLE t\n  PAUSE")
    assert (error.line, error.column) == (3, 3)
    assert '"PAUSE"' in error.message and '"SUSPEND"' in error.message and '"RESUME"' in error.message
    assert "\n    PAUSE\n    ^" in str(error)


@pytest.mark.parametrize("text, fragment", [
    ("CREATE TEMPORARY MATERIALIZED TABLE t AS SELECT 1", "CREATE TEMPORARY MATERIALIZED TABLE is not supported"),
    ("CREATE OR REPLACE MATERIALIZED TABLE t AS SELECT 1", "REPLACE MATERIALIZED TABLE is not supported"),
    ("DROP TEMPORARY MATERIALIZED TABLE t", "DROP TEMPORARY MATERIALIZED TABLE is not supported"),
    ("CREATE MATERIALIZED TABLE t FRESHNESS = 123 AS SELECT 1", "only supports define interval type FRESHNESS"),
    ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL 1 DAY AS SELECT 1", "only supports define interval type FRESHNESS"),
    ("ALTER MATERIALIZED TABLE t SET FRESHNESS = INTERVAL 1 DAY", "only supports define interval type FRESHNESS"),
    ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' DAY", 'Encountered end of statement; expected "REFRESH_MODE", "AS"'),
    ("CREATE MATERIALIZED TABLE t AS  ", 'expected a query after AS'),
    ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' DAY PARTITIONED BY (a) AS SELECT 1",
     'expected "REFRESH_MODE", "AS"'),
    ("CREATE MATERIALIZED TABLE t REFRESH_MODE = FULL FRESHNESS = INTERVAL '1' DAY AS SELECT 1", 'expected "AS"'),
    ("CREATE MATERIALIZED TABLE t (a, b STRING) AS SELECT 1", "either names only or full column definitions"),
    ("ALTER MATERIALIZED TABLE tb1", '"SUSPEND", "RESUME", "REFRESH", "BACKFILL", "AS", "SET", "RESET"'),
    ("ALTER MATERIALIZED TABLE t SUSPEND PARTITION (a = '1')", "expected end of statement"),
    ("ALTER MATERIALIZED TABLE t RESUME PARTITION (a = '1')", "expected end of statement"),
    ("ALTER MATERIALIZED TABLE t REFRESH PARTITION ()", "expected an identifier"),
    ("ALTER MATERIALIZED TABLE t SET REFRESH_MODE = NONE", '"CONTINUOUS" or "FULL"'),
    ("ALTER MATERIALIZED TABLE t SET REFRESH_MODE", 'expected "="'),
    ("ALTER MATERIALIZED TABLE t SET", '"FRESHNESS", "REFRESH_MODE" or "("'),
    ("ALTER MATERIALIZED TABLE t RESET", 'expected "("'),
    ("DROP MATERIALIZED TABLE tb1 IF EXISTS", "expected end of statement"),
    ("SHOW MATERIALIZED TABLES ILIKE 'a'", "expected end of statement"),
    ("CREATE MATERIALIZED TABLE a.b.c.d AS SELECT 1", "at most three parts"),
    # A clause after one it comes before: the order is said, not only what may follow.
    ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' DAY WITH ('a' = 'b') AS SELECT 1",
     'Encountered "WITH"; expected "REFRESH_MODE", "AS". WITH comes before FRESHNESS: a CREATE MATERIALIZED '
     "TABLE's clauses go in the order COMMENT, PARTITIONED BY, WITH, FRESHNESS, REFRESH_MODE, then AS."),
    ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' DAY FRESHNESS = INTERVAL '1' DAY AS SELECT 1",
     "FRESHNESS is given twice."),
    # A near miss of our keyword is our error, with a caret, not Spark's.
    ("CREATE MATERIALISED TABLE t AS SELECT 1", 'Encountered "MATERIALISED"; did you mean MATERIALIZED?\n'
                                                "  CREATE MATERIALISED TABLE t AS SELECT 1\n         ^"),
    ("CREATE OR ALTER MATERIALISED TABLE t AS SELECT 1", "did you mean MATERIALIZED?"),
    ("DROP MATERIALIZE TABLE t", "did you mean MATERIALIZED?"),
    ("SHOW MATERIALISED TABLES", "did you mean MATERIALIZED?"),
])
def test_parse_errors(text, fragment):
    assert fragment in str(error_of(text))


def test_constraint_rules_are_validation_errors():
    with pytest.raises(ValidationError, match="UNIQUE constraint is not supported yet"):
        parse("CREATE MATERIALIZED TABLE t (a INT, UNIQUE (a)) AS SELECT 1 AS a")
    with pytest.raises(ValidationError, match="NOT ENFORCED"):
        parse("CREATE MATERIALIZED TABLE t (PRIMARY KEY (a)) AS SELECT 1 AS a")


HOSTILE = ["2024-01-01\\", "); DROP TABLE src; --", "C:\\temp\\", "it's", "'; --", "a\nb\r\tc", "ünï ☃ \u2028",
           "\\'", "''", "x\\\\", "*/ /*", "{{name}}", "\\u0041", "%_"]


@pytest.mark.parametrize("value", HOSTILE)
def test_the_literal_writer_and_the_lexer_agree_on_hostile_values(value):
    literal = st.sql_string(value)
    refresh = one(f"ALTER MATERIALIZED TABLE mt REFRESH PARTITION (ds = {literal}, region = {literal})")
    assert refresh.partition == {"ds": value, "region": value}
    assert one(f"SET ('k' = {literal}, 'k2' = 'v2')".replace("SET (", "ALTER MATERIALIZED TABLE mt SET (")
               ).options == {"k": value, "k2": "v2"}
    assert one(f"SET 'k' = {literal}").value == value


def test_a_trailing_backslash_cannot_end_a_literal_early():
    statements = parse("ALTER MATERIALIZED TABLE mt REFRESH PARTITION (ds = '2024-01-01\\\\', "
                       "region = '); DROP TABLE src; --')")
    assert [type(s).__name__ for s in statements] == ["AlterRefresh"]
    assert one("ALTER MATERIALIZED TABLE mt SET ('k' = 'C:\\\\temp\\\\', 'k2' = 'v2')").options == \
        {"k": "C:\\temp\\", "k2": "v2"}


def test_block_comments_nest_as_in_spark():
    statements = parse("SHOW MATERIALIZED TABLES /* outer /* inner */ ; DROP TABLE src; */")
    assert [type(s).__name__ for s in statements] == ["ShowMaterializedTables"]
    assert len(parse("SELECT '/* not */' AS a; SELECT 2 /* a /* b */ c */")) == 2
    with pytest.raises(ParseError):
        parse("SHOW MATERIALIZED TABLES /* never closed")


def test_raw_strings_and_spark_escapes():
    assert one("SET 'k' = R'C:\\new'").value == "C:\\new"
    assert one("SET 'k' = '\\u0041\\101\\%\\t'").value == "AA\\%\t"


def test_a_lone_quote_is_not_a_name():
    with pytest.raises(ParseError, match="an identifier"):
        parse("DROP MATERIALIZED TABLE '")


def test_a_partition_key_given_twice_is_an_error():
    with pytest.raises(ParseError, match="Partition key 'DS' is given twice"):
        parse("ALTER MATERIALIZED TABLE mt REFRESH PARTITION (ds = 'a', DS = 'b')")
