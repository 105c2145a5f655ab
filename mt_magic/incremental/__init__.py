"""Delta rules: from a materialized table's query, how to maintain its result from appended rows.

Pure syntax (sqlglot, Spark dialect), no Spark: a query is classified into a rule that writes the SQL
computing the change of the result over named relations (each occurrence of a source table read as
its old files, its new files, or only the appended ones), plus how the change is merged. Spark stays
the judge of what a name means and whether the SQL is valid: the refresh layer analyses what a rule
writes before trusting it, and anything a rule cannot prove is a full recompute, with the reason.
"""
