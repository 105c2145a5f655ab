"""Spark behind one adapter: the only package that touches Spark internals (py4j, the JVM) or tells
a classic SparkSession from a Spark Connect one. Everything above it speaks in public PySpark terms."""
