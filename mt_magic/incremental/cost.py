"""The cost rule of `'refresh.policy' = 'auto'`: maintain a table from the change only when that is
expected to move fewer bytes than recomputing it.

A refresh here costs what it scans, shuffles and writes: Spark reads columnar files at a steady rate
per byte, and the jobs of either technique are few and alike (a stateful table writes its state and
its data both ways). So the estimate is in bytes, from what the manifest already knows:

- incremental: per appended occurrence of a source (the bilinear rule), the occurrences before it read
  whole as they are now, its appended files, the occurrences after it as they were (an occurrence its
  appended rows meet in an inner equality: the row groups within their keys' range); plus, for a table
  that keeps a state, the old state read and merged and the new one written (`STATE_PASSES` × its size);
- full: every occurrence read whole as it is now, plus the state written once.

The incremental bytes are kept per operator's work — a source's appended files read, a join of one
change with another occurrence (read whole or within the change's keys), the state merged, the kept
partials joined with a dimension's change —, so that where maintaining is the dearer choice, the
estimate names the work that weighs the most.

Where only a small source is appended to (a dimension joined to a large fact table), the change must
still be joined with the whole fact table, and the state merged on top: recomputing is cheaper, and
`auto` recomputes — unless the fact table's partials are kept below the join (`below_join`), which
are joined with the dimension instead of the fact table's rows. Measured by `benchmarks/incremental.py` on this project's 2-core machine: over a
fact table appended to by 0.1 %, 1 %, 10 % and 50 %, the incremental refresh of every shape was
faster than the full one (so the rule picks it), and over a dimension appended to by the same shares
the full refresh was (so it recomputes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

STATE_PASSES = 2        # the old state read and shuffled into the merge, the new one written


@dataclass(frozen=True)
class SourceBytes:
    """One source's files: the bytes the published data read, and the bytes appended since."""

    old: int
    added: int

    @property
    def new(self) -> int:
        return self.old + self.added


@dataclass(frozen=True)
class Estimate:
    """Bytes each technique is expected to read and write; `parts`: the incremental bytes per operator's
    work (what its rule reads of its inputs and its state), named."""

    incremental: int
    full: int
    parts: tuple[tuple[str, int], ...] = ()

    @property
    def incremental_cheaper(self) -> bool:
        return self.incremental <= self.full        # a tie maintains: it costs what changed

    def describe(self) -> str:
        """Both figures; where maintaining is the dearer, the operator's work that weighs the most."""
        text = f"incremental ≈ {size_text(self.incremental)}, full ≈ {size_text(self.full)}"
        if self.incremental_cheaper or not self.parts:
            return text
        name, count = max(self.parts, key=lambda part: part[1])
        return f"{text}; the most of it: {name} ≈ {size_text(count)}"


class _Parts(dict[str, int]):
    """Bytes by the work they are read or written for (one name, one sum)."""

    def add(self, name: str, count: int) -> int:
        self[name] = self.get(name, 0) + count
        return count


# A term's appended occurrence i and another occurrence j of its branch (its new files read, else its
# old ones) → the bytes j's read scans, bounded by i's keys; None: read whole.
Within = Callable[[int, int, bool], "int | None"]


def estimate(branches: Sequence[Sequence[str]], sources: Mapping[str, SourceBytes],
             state_bytes: int | None, within: Within | None = None, checked: Collection[int] = (),
             state_work: str = "", apart: Mapping[int, Collection[int]] | None = None,
             above: Sequence[str] = (), state_passes: int = STATE_PASSES) -> Estimate:
    """`branches`: per UNION ALL branch (one for a plain SELECT), the source each occurrence reads;
    `state_bytes`: the hidden state's size, None for a table that keeps none; `within`: what a read
    bounded by the appended rows' join keys scans (`key_bounds`); `checked`: the occurrences held still
    but moving each row one way (an EXISTS or IN, under NOT too, a LEFT JOIN's right side), whose
    appended rows are checked against their old ones (`linear.term_trees`); `state_work`: what reading
    and writing `state_bytes` is for, if not merging a state (a linear table's rows taken away); `apart`:
    per occurrence, those an append to it reads none of (the other sides of a UNION ALL it is read under);
    `above`: the sources the query above an aggregate reads (`nested`), read whole by either technique;
    `state_passes`: how often the state's bytes are read or written (its partials only read: once)."""
    parts = _Parts()
    incremental = full = start = 0
    for occurrences in branches:
        for i, source in enumerate(occurrences):
            full += sources[source].new
            if not sources[source].added:
                continue
            incremental += parts.add(f"reading {source}'s appended files", sources[source].added)
            for j, other in enumerate(occurrences):
                if j != i and start + j not in (apart or {}).get(start + i, ()):
                    whole = sources[other].new if j < i else sources[other].old
                    bounded = within(start + i, start + j, j < i) if within is not None else None
                    incremental += parts.add(f"joining {source}'s change with {other} read whole", whole) \
                        if bounded is None else \
                        parts.add(f"joining {source}'s change with {other}'s row groups within its keys",
                                  min(whole, bounded))
            if start + i in checked:       # Spark's semi- and anti-joins of subqueries bound nothing
                incremental += parts.add(f"checking the rows {source}'s change lets pass or stops against its old rows",
                                         sources[source].old)
        start += len(occurrences)
    for source in above:
        full += sources[source].new
        incremental += parts.add(f"reading {source} whole for the query above the aggregate", sources[source].new)
    if state_bytes is not None:
        incremental += parts.add(state_work or _MERGING, state_passes * state_bytes)
        full += state_bytes
    return Estimate(incremental, full, tuple(parts.items()))


def estimate_below(kept: str, sources: Mapping[str, SourceBytes], partials_bytes: int, state_bytes: int,
                   padded: bool = False) -> Estimate:
    """A table whose partials are kept below its joins (`below_join`): the kept source's appended rows
    are read alone, their partials joined with the other sources; an append to another source (any
    change, where the kept source is padded) joins every kept partial with them instead of reading the
    kept source whole."""
    parts = _Parts()
    parts.add(f"reading {kept}'s appended files", sources[kept].added)
    for source, read in sources.items():
        if source != kept:
            parts.add(f"joining the kept partials with {source} read whole", read.new)
    if padded or any(b.added for s, b in sources.items() if s != kept):
        parts.add(f"joining every kept partial of {kept} with the other sources' change", partials_bytes)
    parts.add(_MERGING, STATE_PASSES * state_bytes)
    return Estimate(sum(parts.values()), sum(b.new for b in sources.values()) + state_bytes, tuple(parts.items()))


_MERGING = "merging the state (the old one read, the new one written)"


def size_text(count: int) -> str:
    """Bytes as a person reads them: 812 B, 3.4 KB, 120 MB."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
