"""One SparkSession per test process; each test gets its own database and catalog store.

MT_MAGIC_SPARK_REMOTE=local[2] runs the whole suite against a local Spark Connect server instead of a
classic session (`make test` runs both).
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import settings

from mt_magic import Gateway
from mt_magic.session import local_session

from helpers import kernels

_counter = itertools.count()

# The tests' data is a few rows, where compiling each query's stages to Java first (Spark's whole-stage
# code generation) costs more than running them: the JVMs the tests start — this process's session or
# Connect server, and the services and kernels they launch, which inherit it — run without it. Measured
# alone, the stateful test of every shape: 254 s with it, 223 s without. (Expression code generation
# stays: without it, `spark.sql.codegen.factoryMode=NO_CODEGEN`, Spark 4.3 cannot list a catalog's
# tables — EXPRESSION_DECODING_FAILED on `catalog.Table`.) The benchmarks keep Spark's defaults.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.sql.codegen.wholeStage=false pyspark-shell")

# Those JVMs run thousands of small, different queries on two shared cores. Where their CPU went, read
# from the threads of the classic pass's JVM and the Connect server's during a CI run: code cache
# sweeping (19 %), garbage collection (15 %; Connect 22 %) and, on the Connect server, C2 compiling
# (52 %) — Spark loads a class for each query it generates code for. So: the quick compiler only, a
# code cache that does not fill (48 MB with it), the serial collector. Measured alone, the stateful test
# of every shape: the classic JVM 145 → 90 s of CPU (218 → 187 s), the Connect server's 237 → 123 s
# (192 → 182 s); fresh-clone CI 36:50 → 27:53.
# And they start from the archive of Spark's classes `make test` builds first (tests/spark_classes.py:
# a start 13–14 → 6–7 s of CPU), where it exists.
ARCHIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "spark-classes.jsa")
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"
                      + (f" -XX:SharedArchiveFile={ARCHIVE}" if os.path.exists(ARCHIVE) else ""))

# Property tests: on CI a few dozen examples each, reproducible (derandomized), no deadline (a shared
# 2-core machine); locally more, with failing examples kept in .hypothesis/ and tried first next time.
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("local", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "local"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    session = local_session("mt_magic-tests", warehouse=str(tmp_path_factory.mktemp("warehouse")))
    yield session
    session.stop()


@pytest.fixture
def db(spark):
    """A fresh current database, so tests never see each other's tables."""
    name = f"t{os.getpid()}_{next(_counter)}"
    spark.sql(f"CREATE DATABASE {name}")
    spark.catalog.setCurrentDatabase(name)
    yield name
    for _, view, temporary in spark.sql(f"SHOW VIEWS IN {name}").collect():   # a command: no Spark job
        if temporary:
            spark.catalog.dropTempView(view)
    spark.catalog.setCurrentDatabase("default")
    spark.sql(f"DROP DATABASE {name} CASCADE")


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store" / "catalog.json")


@pytest.fixture
def gw(spark, db, store_path):
    gateway = Gateway(spark, catalog_store=store_path)
    yield gateway
    gateway.close()


@pytest.fixture
def sales(spark, db):
    """The seed's sales data: a few days, a few products."""
    spark.sql("CREATE TABLE sales (ds STRING, product_id INT, amount DOUBLE) USING parquet")
    spark.sql("INSERT INTO sales VALUES ('2024-01-01', 1, 10.0), ('2024-01-01', 2, 5.0), "
              "('2024-01-02', 1, 7.0), ('2024-01-02', 2, 1.5)")
    return "sales"


@pytest.fixture
def kernel(tmp_path):
    """Real kernels with the installed autoload and a store of their own: `kernel(**env)` starts one."""
    with kernels(tmp_path) as start:
        yield start
