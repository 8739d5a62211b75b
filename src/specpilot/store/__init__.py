"""The pilot file: one DuckDB file holds one pilot, written as records arrive.

Tables follow the record dataclasses of :mod:`specpilot.records` (``store.schema``):
``pilots`` -> ``arms`` (one row per run = one execution of one arm) -> ``phases`` ->
``requests`` -> ``chunks``, ``rounds``, ``prefills``; ``snapshots`` at every phase edge;
``quality``, ``outputs``, ``consistency``, ``compat``, ``drills``.

    >>> import os, tempfile
    >>> from specpilot.records import (ArmRecord, ChunkTiming, PilotRecord, RequestRecord,
    ...                                RoundRecord)
    >>> from specpilot.store import Store, read_pilot
    >>> path = os.path.join(tempfile.mkdtemp(), "pilot.duckdb")
    >>> with Store(path) as st:
    ...     st.add_pilot(PilotRecord("p1", "demo", {}, "", "0.1", 0.0))
    ...     st.add_arm(ArmRecord("p1", "run-1", "speculative", "speculative", "builtin"))
    ...     rec = RequestRecord("run-1", "speculative", "peak", "code", "peak-000000", 0.0, "ok",
    ...                         output_tokens=4)
    ...     st.sink(rec, [ChunkTiming("peak-000000", 0.5, 1, "run-1", 0),
    ...                   ChunkTiming("peak-000000", 0.6, 3, "run-1", 1)],
    ...             [RoundRecord("peak-000000", 0, 3, 2, 3, 0.01, 0.02, 0.001,
    ...                          run_id="run-1", arm="speculative")])
    >>> data = read_pilot(path)
    >>> data.arms[0].role, data.request_rounds[0].committed, data.chunk_gaps[0].tokens.tolist()
    ('speculative', 3, [3])

API (``Store``; the load generator and the pilot write through it):

- ``Store(path)`` creates or opens a pilot file for writing (``read_only=True`` for
  reading); ``close()`` commits, checkpoints and closes; a context manager.
- Writes go through one writer thread that commits in groups. ``add_pilot``, ``add_arm``,
  ``add_phases``, ``add_requests``, ``add_chunks(chunks, arm=...)``, ``add_rounds``,
  ``add_prefills``, ``add_snapshots``, ``add_quality``, ``add_outputs``, ``add_consistency``,
  ``add_compat``, ``add_drills`` (or ``add(table, records)``) wait for their commit; pilots,
  arms, phases and requests are upserts by key (write the record again to update it).
  ``sink(record, chunks, rounds, prefill)`` queues a finished request and returns at once (the
  load generator's sink); ``flush()`` waits for the queue; ``committed_requests`` counts what
  is durable. ``add_columns(table, numpy_columns)`` bulk-inserts big tables; ``delete(table,
  **where)`` clears a selection before a recompute.
- Reads: ``read_pilot(path, rounds=False, columns=False)`` (or ``Store.read`` on an open
  store: the same reader) -> typed ``records.PilotData`` (``columns=True``: requests and
  per-request round aggregates as numpy columns, what ``analysis`` takes at scale: 1M
  requests without 1M objects); ``records(table, **where)`` typed rows; ``columns(sql)``
  numpy arrays; ``arrow(sql)`` a pyarrow table (if installed); ``query(sql)`` tuples;
  ``counts()``; ``export_parquet(dir)``.
- ``PhaseRecorder(store, run_id, arm, scrape, durations).attach(runner)`` writes phases and
  snapshots at every phase edge of a ``loadgen.LoadRunner``.
- A file of another schema version raises ``PilotFileError`` naming the version and the fix
  (``store.schema``); ``export_file(path, dir)`` exports any version's tables as they are.
"""

from specpilot.store.phases import PhaseRecorder
from specpilot.store.reader import export_file
from specpilot.store.schema import SCHEMA_VERSION, TABLES, PilotFileError
from specpilot.store.store import Store, read_pilot

__all__ = [
    "SCHEMA_VERSION",
    "TABLES",
    "PhaseRecorder",
    "PilotFileError",
    "Store",
    "export_file",
    "read_pilot",
]
