"""The 22 TPC-H queries as FULL materialized tables, against plain Spark doing the same work, on a
classic session and over Spark Connect, in one run.

For every query: CREATE MATERIALIZED TABLE (which fills the table) ÷ plain `CREATE TABLE … AS`, and a
manual refresh ÷ plain `INSERT OVERWRITE`, each after the data was rewritten (so the refresh runs);
each the median of three rounds, after one warm-up statement of each kind.
The figures are the sums over the 22 queries, per mode (target over Connect and classic: ≤ 1.05).
The data is TPC-H's schema filled by Spark itself (deterministic hashes, no dbgen), at a small scale:
what is measured is the cost a materialized table adds to Spark's work, not Spark.
PySpark runs one kind of session per process, so the script runs itself once per mode.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from tpch_queries import QUERIES
from workload import exit_on_missed, last_run, open_gateway, timed

SCALE = float(os.environ.get("TPCH_SCALE", "0.1"))
TARGET = 1.05
ROUNDS = 3                  # refreshes per query, each after new facts; the median counts
NATIONS = [("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4), ("ETHIOPIA", 0),
           ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2), ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2),
           ("JORDAN", 4), ("KENYA", 0), ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2),
           ("ROMANIA", 3), ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
           ("UNITED STATES", 1)]
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]


def pick(options: list[str], seed: str) -> str:
    """One of `options`, chosen by a hash of `seed` (a SQL expression)."""
    array = ", ".join(f"'{o}'" for o in options)
    return f"element_at(array({array}), CAST(pmod(hash({seed}), {len(options)}) + 1 AS INT))"


def number(seed: str, low: float, high: float, salt: int) -> str:
    return f"({low} + pmod(hash({seed}, {salt}), 1000000) / 1000000.0 * ({high} - {low}))"


def generate(spark, generation: int = 0) -> None:
    """TPC-H's eight tables at SCALE; `generation` changes the facts (a rewrite of the data)."""
    suppliers, customers, parts = int(10000 * SCALE), int(150000 * SCALE), int(200000 * SCALE)
    orders = int(1500000 * SCALE)
    g = generation
    tables = {
        "region": f"SELECT CAST(id AS INT) AS r_regionkey, element_at(array({', '.join(repr(r) for r in REGIONS)}), "
                  f"CAST(id + 1 AS INT)) AS r_name, 'region' AS r_comment FROM range(5)",
        "nation": "SELECT * FROM VALUES " + ", ".join(f"({i}, '{n}', {r}, 'nation')" for i, (n, r) in enumerate(NATIONS))
                  + " AS t(n_nationkey, n_name, n_regionkey, n_comment)",
        "supplier": f"""SELECT CAST(id AS INT) AS s_suppkey, concat('Supplier#', lpad(id, 9, '0')) AS s_name,
            concat('address ', id) AS s_address, CAST(pmod(hash(id, 1), 25) AS INT) AS s_nationkey,
            concat(CAST(pmod(hash(id, 1), 25) + 10 AS STRING), '-', lpad(pmod(hash(id, 2), 1000), 3, '0')) AS s_phone,
            {number('id', -999.99, 9999.99, 3)} AS s_acctbal,
            IF(pmod(hash(id, 4), 200) = 0, 'wait Customer slow Complaints', 'carefully final deposits') AS s_comment
            FROM range(1, {suppliers + 1})""",
        "customer": f"""SELECT CAST(id AS INT) AS c_custkey, concat('Customer#', lpad(id, 9, '0')) AS c_name,
            concat('address ', id) AS c_address, CAST(pmod(hash(id, 5), 25) AS INT) AS c_nationkey,
            concat(CAST(pmod(hash(id, 5), 25) + 10 AS STRING), '-', lpad(pmod(hash(id, 6), 1000), 3, '0')) AS c_phone,
            {number('id', -999.99, 9999.99, 7)} AS c_acctbal,
            {pick(['AUTOMOBILE', 'BUILDING', 'FURNITURE', 'MACHINERY', 'HOUSEHOLD'], 'id, 8')} AS c_mktsegment,
            'regular accounts' AS c_comment FROM range(1, {customers + 1})""",
        "part": f"""SELECT CAST(id AS INT) AS p_partkey,
            concat({pick(['green', 'forest', 'blue', 'red', 'ivory', 'navy'], 'id, 9')}, ' ',
                   {pick(['almond', 'antique', 'green', 'lace', 'metallic'], 'id, 10')}) AS p_name,
            concat('Manufacturer#', pmod(hash(id, 11), 5) + 1) AS p_mfgr,
            concat('Brand#', pmod(hash(id, 11), 5) + 1, pmod(hash(id, 12), 5) + 1) AS p_brand,
            concat({pick(['STANDARD', 'SMALL', 'MEDIUM', 'LARGE', 'ECONOMY', 'PROMO'], 'id, 13')}, ' ',
                   {pick(['ANODIZED', 'BURNISHED', 'PLATED', 'POLISHED', 'BRUSHED'], 'id, 14')}, ' ',
                   {pick(['TIN', 'NICKEL', 'BRASS', 'STEEL', 'COPPER'], 'id, 15')}) AS p_type,
            CAST(pmod(hash(id, 16), 50) + 1 AS INT) AS p_size,
            concat({pick(['SM', 'LG', 'MED', 'JUMBO', 'WRAP'], 'id, 17')}, ' ',
                   {pick(['CASE', 'BOX', 'BAG', 'JAR', 'PKG', 'PACK', 'CAN', 'DRUM'], 'id, 18')}) AS p_container,
            {number('id', 900, 2000, 19)} AS p_retailprice, 'final deposits' AS p_comment
            FROM range(1, {parts + 1})""",
        "partsupp": f"""SELECT CAST(p AS INT) AS ps_partkey,
            CAST(pmod(p + i * ({suppliers} / 4 + (p - 1) / {suppliers}), {suppliers}) + 1 AS INT) AS ps_suppkey,
            CAST(pmod(hash(p, i, 20), 9999) + 1 AS INT) AS ps_availqty, {number('p, i', 1, 1000, 21)} AS ps_supplycost,
            'carefully regular' AS ps_comment
            FROM (SELECT id AS p FROM range(1, {parts + 1})) LATERAL VIEW explode(sequence(0, 3)) AS i""",
        "orders": f"""SELECT CAST(id AS BIGINT) AS o_orderkey, CAST(pmod(hash(id, 22, {g}), {customers}) + 1 AS INT) AS o_custkey,
            {pick(['F', 'O', 'P'], f'id, 23, {g}')} AS o_orderstatus, {number(f'id, {g}', 1000, 400000, 24)} AS o_totalprice,
            date_add(DATE '1992-01-01', CAST(pmod(hash(id, 25, {g}), 2405) AS INT)) AS o_orderdate,
            {pick(['1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'], f'id, 26, {g}')} AS o_orderpriority,
            concat('Clerk#', pmod(hash(id, 27), 1000)) AS o_clerk, 0 AS o_shippriority,
            IF(pmod(hash(id, 28), 50) = 0, 'the special packages requests', 'ironic deposits') AS o_comment
            FROM range(1, {orders + 1})""",
    }
    for name, select in tables.items():
        if name not in ("orders",) and generation:
            continue            # a rewrite changes the facts; the dimensions stay
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING parquet AS {select}")
    spark.sql(f"""INSERT OVERWRITE lineitem SELECT o_orderkey AS l_orderkey,
            CAST(pmod(hash(o_orderkey, n, 30), {parts}) + 1 AS INT) AS l_partkey,
            CAST(pmod(hash(o_orderkey, n, 31), {suppliers}) + 1 AS INT) AS l_suppkey, CAST(n AS INT) AS l_linenumber,
            CAST(pmod(hash(o_orderkey, n, 32), 50) + 1 AS DOUBLE) AS l_quantity,
            {number('o_orderkey, n', 900, 100000, 33)} AS l_extendedprice,
            ROUND({number('o_orderkey, n', 0, 0.1, 34)}, 2) AS l_discount, ROUND({number('o_orderkey, n', 0, 0.08, 35)}, 2) AS l_tax,
            {pick(['R', 'A', 'N'], 'o_orderkey, n, 36')} AS l_returnflag, {pick(['O', 'F'], 'o_orderkey, n, 37')} AS l_linestatus,
            date_add(o_orderdate, CAST(pmod(hash(o_orderkey, n, 38), 121) + 1 AS INT)) AS l_shipdate,
            date_add(o_orderdate, CAST(pmod(hash(o_orderkey, n, 39), 61) + 30 AS INT)) AS l_commitdate,
            date_add(o_orderdate, CAST(pmod(hash(o_orderkey, n, 38), 121) + pmod(hash(o_orderkey, n, 40), 30) + 2 AS INT)) AS l_receiptdate,
            {pick(['DELIVER IN PERSON', 'COLLECT COD', 'NONE', 'TAKE BACK RETURN'], 'o_orderkey, n, 41')} AS l_shipinstruct,
            {pick(['REG AIR', 'AIR', 'RAIL', 'SHIP', 'TRUCK', 'MAIL', 'FOB'], 'o_orderkey, n, 42')} AS l_shipmode,
            'furiously' AS l_comment
            FROM orders LATERAL VIEW explode(sequence(1, CAST(pmod(hash(o_orderkey, 43), 7) + 1 AS INT))) AS n""")


LINEITEM = ("l_orderkey BIGINT, l_partkey INT, l_suppkey INT, l_linenumber INT, l_quantity DOUBLE, "
            "l_extendedprice DOUBLE, l_discount DOUBLE, l_tax DOUBLE, l_returnflag STRING, l_linestatus STRING, "
            "l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE, l_shipinstruct STRING, l_shipmode STRING, "
            "l_comment STRING")


def measure(remote: str | None) -> dict:
    spark, gateway = open_gateway("tpch", remote)
    try:
        spark.sql(f"CREATE TABLE lineitem ({LINEITEM}) USING parquet")
        generate(spark)
        # Warm up: the first jobs and statements of a process pay for class loading on both sides.
        spark.sql(f"CREATE TABLE warm USING parquet AS {QUERIES[1]}")
        gateway.execute(f"CREATE MATERIALIZED TABLE warm_mt FRESHNESS = INTERVAL '1' DAY AS {QUERIES[1]}")
        creates, ctases = [], []
        for round_ in range(ROUNDS):               # alternating, so drift hits both alike
            creates.append({})
            ctases.append({})
            for number_, query in QUERIES.items():
                ctases[-1][number_] = timed(lambda: spark.sql(f"CREATE TABLE p{number_}_{round_} USING parquet AS {query}"))
                creates[-1][number_] = timed(lambda: gateway.execute(
                    f"CREATE MATERIALIZED TABLE m{number_}_{round_} FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL "
                    f"AS {query}"))
                last_run(gateway, f"m{number_}_{round_}")
                if round_:             # 22 tables on the store, as the workload has
                    gateway.execute(f"DROP MATERIALIZED TABLE m{number_}_{round_}")
                    spark.sql(f"DROP TABLE p{number_}_{round_}")
        gateway.execute("DROP MATERIALIZED TABLE warm_mt")
        create = {q: statistics.median(r[q] for r in creates) for q in QUERIES}
        ctas = {q: statistics.median(r[q] for r in ctases) for q in QUERIES}
        refreshes, overwrites = [], []
        for generation in range(1, ROUNDS + 1):    # new facts each round: every refresh has work to do
            generate(spark, generation)
            refreshes.append({})
            overwrites.append({})
            for number_, query in QUERIES.items():
                overwrites[-1][number_] = timed(lambda: spark.sql(f"INSERT OVERWRITE p{number_}_0 {query}"))
                refreshes[-1][number_] = timed(lambda: gateway.execute(f"ALTER MATERIALIZED TABLE m{number_}_0 REFRESH"))
                last_run(gateway, f"m{number_}_0")
        refresh = {q: statistics.median(r[q] for r in refreshes) for q in QUERIES}
        overwrite = {q: statistics.median(r[q] for r in overwrites) for q in QUERIES}
        for number_ in QUERIES:                    # the materialized tables hold what the queries give
            assert spark.table(f"m{number_}_0").count() == spark.table(f"p{number_}_0").count(), number_
        return {"create": create, "ctas": ctas, "refresh": refresh, "overwrite": overwrite}
    finally:
        gateway.close()
        spark.stop()


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(measure(None if sys.argv[1] == "classic" else sys.argv[1])))
        return
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("MT_MAGIC_SPARK_REMOTE", None)
    targets = {}
    for mode, arg in (("classic", "classic"), ("connect", "local[2]")):
        out = subprocess.run([sys.executable, __file__, arg], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{mode} run failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        sums = {k: sum(v.values()) for k, v in r.items()}
        create, refresh = sums["create"] / sums["ctas"], sums["refresh"] / sums["overwrite"]
        worst = max(r["create"], key=lambda q: r["create"][q] - r["ctas"][q])
        print(f"{mode:8} TPC-H (scale {SCALE}), 22 FULL tables: CREATE {sums['create']:.2f} s ÷ plain CTAS "
              f"{sums['ctas']:.2f} s = {create:.2f}; refresh {sums['refresh']:.2f} s ÷ INSERT OVERWRITE "
              f"{sums['overwrite']:.2f} s = {refresh:.2f} (target <= {TARGET}); most added to one CREATE: Q{worst} "
              f"+{(r['create'][worst] - r['ctas'][worst]) * 1000:.0f} ms")
        targets[f"{mode} CREATE"], targets[f"{mode} refresh"] = create <= TARGET, refresh <= TARGET
    exit_on_missed(targets)


if __name__ == "__main__":
    main()
