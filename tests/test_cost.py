"""The cost rule of 'refresh.policy' = 'auto', by itself (no Spark): bytes each technique is expected to
read and write, from the manifest's listings and the state's size."""

from __future__ import annotations

from mt_magic.incremental.cost import STATE_PASSES, SourceBytes, estimate, estimate_below, size_text
from mt_magic.incremental.rules import apart_occurrences, maintenance

MB = 1_000_000


def test_an_append_to_one_source_reads_the_change_and_the_state():
    found = estimate([("fact",)], {"fact": SourceBytes(old=300 * MB, added=3 * MB)}, state_bytes=MB // 10)
    assert found.incremental == 3 * MB + STATE_PASSES * MB // 10
    assert found.full == 303 * MB + MB // 10
    assert found.incremental_cheaper


def test_a_join_reads_the_other_side_by_the_bilinear_rule():
    sources = {"fact": SourceBytes(300 * MB, 3 * MB), "dim": SourceBytes(MB, 0)}
    linear = estimate([("fact", "dim")], sources, None)      # Δfact ⋈ dim (old)
    assert (linear.incremental, linear.full) == (3 * MB + MB, 304 * MB)
    both = estimate([("fact", "dim")], {"fact": SourceBytes(300 * MB, 3 * MB), "dim": SourceBytes(MB, MB)}, None)
    # Δfact ⋈ dim (old) + fact (new) ⋈ Δdim: the whole fact table is read for the dimension's change
    assert both.incremental == (3 * MB + MB) + (303 * MB + MB)
    assert not both.incremental_cheaper


def test_an_append_to_a_small_dimension_recomputes():
    """Its change must be joined with the whole fact table, and the state merged on top."""
    found = estimate([("fact", "dim")], {"fact": SourceBytes(300 * MB, 0), "dim": SourceBytes(MB, MB // 2)},
                     state_bytes=40 * MB)
    assert found.incremental == 300 * MB + MB // 2 + STATE_PASSES * 40 * MB
    assert found.full == 300 * MB + MB + MB // 2 + 40 * MB
    assert not found.incremental_cheaper
    assert found.describe() == "incremental ≈ 380.5 MB, full ≈ 341.5 MB; the most of it: joining dim's change " \
                               "with fact read whole ≈ 300.0 MB"      # the join, not the state's merge (80 MB)


def test_union_all_branches_do_not_join_each_other():
    sources = {"a": SourceBytes(10 * MB, MB), "b": SourceBytes(50 * MB, 0)}
    found = estimate([("a",), ("b",)], sources, None)
    assert (found.incremental, found.full) == (MB, 61 * MB)
    # under an aggregate, a UNION ALL in FROM: its sides apart (`rules.apart_occurrences`), joined with a third
    aggregated = maintenance("SELECT k, SUM(v) FROM (SELECT a AS k, b AS v FROM db.a UNION ALL SELECT c, d FROM db.b) "
                             "AS u JOIN db.c ON c.k = u.k GROUP BY k")
    sources["db.a"], sources["db.b"], sources["db.c"] = sources.pop("a"), sources.pop("b"), SourceBytes(2 * MB, 0)
    found = estimate([aggregated.occurrences], sources, None, apart=apart_occurrences(aggregated))
    assert (found.incremental, found.full) == (MB + 2 * MB, 63 * MB)       # Δa ⋈ c: b read for none of it


def test_a_tie_keeps_maintaining_and_a_loss_recomputes():
    """A state as large as the source (top-N where every key holds fewer than N rows): a tie."""
    tie = estimate([("t",)], {"t": SourceBytes(10 * MB, MB)}, state_bytes=10 * MB)
    assert tie.incremental == 21 * MB and tie.full == 21 * MB and tie.incremental_cheaper
    loss = estimate([("t",)], {"t": SourceBytes(10 * MB, MB)}, state_bytes=30 * MB)
    assert loss.incremental > loss.full and not loss.incremental_cheaper
    assert loss.describe().endswith("; the most of it: merging the state (the old one read, the new one "
                                    "written) ≈ 60.0 MB")


def test_sizes_read_as_a_person_reads_them():
    assert [size_text(n) for n in (0, 999, 1_000, 3_400, 120 * MB, 5_300 * MB, 2_000_000 * MB)] == \
        ["0 B", "999 B", "1.0 KB", "3.4 KB", "120.0 MB", "5.3 GB", "2.0 TB"]


def test_a_join_bounded_by_the_appended_keys_reads_only_the_row_groups_within():
    """Both fact tables appended (new orders and their items): read whole, each side's other table
    makes the change dearer than recomputing; bounded by the appended keys (what `within` says the
    read scans), it is not. An occurrence `within` knows nothing of is read whole."""
    sources = {"orders": SourceBytes(100 * MB, MB), "items": SourceBytes(400 * MB, 4 * MB)}
    whole = estimate([("orders", "items")], sources, MB)
    assert whole.incremental == (MB + 400 * MB) + (101 * MB + 4 * MB) + STATE_PASSES * MB
    assert not whole.incremental_cheaper
    assert whole.describe().endswith("; the most of it: joining orders's change with items read whole ≈ 400.0 MB")
    scans = {(0, 1, False): 0, (1, 0, True): MB}     # ΔO ⋈ items (old): none; orders (new) ⋈ Δitems: the new orders
    bounded = estimate([("orders", "items")], sources, MB, lambda i, j, new: scans.get((i, j, new)))
    assert bounded.incremental == MB + (MB + 4 * MB) + STATE_PASSES * MB and bounded.incremental_cheaper
    assert bounded.describe() == "incremental ≈ 8.0 MB, full ≈ 506.0 MB"    # cheaper: no part named
    unknown = estimate([("orders", "items")], sources, MB, lambda i, j, new: None)
    assert unknown.incremental == whole.incremental


def test_partials_kept_below_a_join_are_joined_with_a_dimensions_change_instead_of_the_fact_table():
    """A dimension appended to: every kept partial of the fact table is joined with it, its rows are not
    read; where the partials outweigh the fact table (as many as its rows), that join is named."""
    sources = {"fact": SourceBytes(300 * MB, 0), "dim": SourceBytes(MB, MB)}
    found = estimate_below("fact", sources, partials_bytes=50 * MB, state_bytes=MB)
    assert (found.incremental, found.full) == (2 * MB + 50 * MB + STATE_PASSES * MB, 303 * MB)
    assert found.incremental_cheaper
    heavy = estimate_below("fact", sources, partials_bytes=400 * MB, state_bytes=MB)
    assert not heavy.incremental_cheaper and heavy.describe().endswith(
        "; the most of it: joining every kept partial of fact with the other sources' change ≈ 400.0 MB")
