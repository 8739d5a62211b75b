"""The open-loop runner: send each scheduled request at its time, whatever came before.

Every scheduled request ends as exactly one RequestRecord. Each finished request goes to
``sink(record, chunks, rounds, prefill)`` at once, from the event loop: a sink must only queue
(``Store.sink`` does; its own writer thread commits). The same records come back in the result.
One clock: ``time.perf_counter()``; ``t_run`` is schedule time 0 on it, ``wall_t_run`` the same
instant in Unix time.

Timeline of one request: the dispatcher starts its task at ``scheduled_t`` (the dispatch lag,
task start - scheduled_t, is the generator's own timing error and decides trustworthiness);
the task runs the request's client-side stages (retrieval, tool calls; measured seconds go to
``RequestRecord.client_stages``), waits for the concurrency cap if there is one, then sends
(``sent_t``). The send lag, sent_t - scheduled_t - stage seconds, is the cap's wait.
Simulated stages are non-blocking waits; a real retrieval (BM25) runs on this event loop: the
builtin document set costs ~0.1 ms, a large one (~5k documents: ~20 ms) delays the requests
due meanwhile, which the dispatch lag shows and the trustworthiness check flags.

Phases share one open-loop timeline by default: phase P starts ``phase_starts[P]`` seconds
after the run's start, whether or not the previous phase's requests have finished (a burst that
overloads the server spills into the next phase, as in production). ``phase_timing =
"back_to_back"`` instead starts each phase when the previous one has drained.

Phase edges: ``on_phase(name, edge, t)`` runs when a phase starts and ends (``loadgen.phases``);
back to back the runner waits for each hook (exact per-phase counter deltas, nothing else in
flight); on one timeline phases may overlap and the deltas are approximate."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from specpilot.errors import ConfigError
from specpilot.loadgen import gcfreeze
from specpilot.loadgen.client import Outcome, Sink, new_record, request_id, send
from specpilot.loadgen.config import LoadConfig, request_body, request_path
from specpilot.loadgen.phases import PhaseEdges, PhaseHook, phase_starts_for, resolve_starts
from specpilot.loadgen.progress import ProgressDisplay
from specpilot.loadgen.summary import LoadResult, LoadSummary, RunStats
from specpilot.records import (
    ChunkTiming,
    PrefillRecord,
    RequestRecord,
    RoundRecord,
    ScheduledRequest,
)

if TYPE_CHECKING:
    from specpilot.workload.schedule import Schedule

_EDGE_LEAD_S = 0.3  # with design.start_at: the first phase's edge and "before" scrape this early
_LEAD_S = 0.02  # phase start is this far after the dispatcher is ready

# what stops a load cleanly (records kept, the run marked interrupted): Ctrl-C, and the SIGTERM
# a supervisor or `kill` sends
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LoadRunner:
    """Replays a schedule against ``cfg.endpoint.url``.

        >>> runner = LoadRunner(schedule, LoadConfig.build("http://127.0.0.1:8080"))  # doctest: +SKIP
        >>> result = runner.run()                                          # doctest: +SKIP
        >>> result.summary.status_counts, result.summary.trustworthy      # doctest: +SKIP

    ``send_t`` is relative to its phase's start. With schedule timing (the default) a phase
    starts at ``phase_starts[phase]`` on the run's timeline; a schedule of one phase needs no
    starts, several do (``LoadRunner.for_schedule`` fills them in from a ``Schedule``). With
    back-to-back timing phases run in order of first appearance.
    """

    def __init__(
        self,
        schedule: Sequence[ScheduledRequest],
        cfg: LoadConfig,
        sink: Sink | None = None,
        on_phase: PhaseHook | None = None,
    ) -> None:
        self.schedule = list(schedule)
        self.cfg = cfg
        self.sink = sink
        ids = [request_id(r) for r in self.schedule]
        if len(set(ids)) != len(ids):
            raise ConfigError(
                "schedule has duplicate (phase, index) pairs: each needs its own index"
            )
        rng = random.Random(cfg.design.seed)
        self._cancel = {rid for rid in ids if rng.random() < cfg.design.cancel_fraction}
        self.phase_names = list(dict.fromkeys(r.phase for r in self.schedule))
        self.phase_sizes = Counter(r.phase for r in self.schedule)
        self.phase_starts = (
            resolve_starts(self.phase_names, cfg.design.phase_starts)
            if cfg.design.phase_timing == "schedule"
            else {}
        )
        self._stats = RunStats()
        self._note_other_routes()
        self._stage_runner: Any = cfg.stages.runner(
            {n for r in self.schedule for n in r.client_stages}, self._stats.notes
        )
        self._cold: set[str] = set()
        self.t_run: float | None = None
        self.wall_t_run: float | None = None
        self.stop_reason: str | None = None
        self.interrupted = False
        self.counts = {"sent": 0, "done": 0, "failed": 0}
        self._records: dict[str, RequestRecord] = {}
        self._chunks: list[ChunkTiming] = []
        self._rounds: list[RoundRecord] = []
        self._prefills: list[PrefillRecord] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connect_errors = 0
        self._edges = PhaseEdges(self.phase_sizes, on_phase)

    def _note_other_routes(self) -> None:
        """Say where requests go to another route than the run's ``api`` (a request log's
        entries replay on the route they were logged on)."""
        api = self.cfg.endpoint.api
        other = Counter(
            request_path(self.cfg, r) for r in self.schedule if r.api not in (None, api)
        )
        for path, n in sorted(other.items()):
            self._stats.notes.append(
                f"{n} request(s) of a request log sent to {path} as logged (the run's api: {api})"
            )

    # -- control -------------------------------------------------------------------------
    def stop(self, reason: str = "stopped") -> None:
        """Stop sending (thread-safe); in-flight requests end as ``error`` (``cancelled`` on
        Ctrl-C), the rest as ``not_sent``."""
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop, reason)
        else:
            self._stop(reason)

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            for t in list(self._tasks):
                t.cancel()

    @classmethod
    def for_schedule(
        cls,
        schedule: Schedule,
        cfg: LoadConfig,
        sink: Sink | None = None,
        phases: Sequence[str] | None = None,
        *,
        warmup: bool = True,
        on_phase: PhaseHook | None = None,
    ) -> LoadRunner:
        """A runner for (a selection of) a workload ``Schedule``: phase starts and client-stage
        specs come from the schedule unless ``cfg`` sets them."""
        requests = schedule.select(phases, warmup=warmup)
        present = {r.phase for r in requests}
        starts = phase_starts_for(p for p in schedule.phases if p.name in present)
        d, st = cfg.design, cfg.stages
        cfg = cfg.with_options(
            phase_starts=d.phase_starts if d.phase_starts is not None else starts,
            stages=st.specs or dict(schedule.stages),
            stages_base_dir=st.base_dir or schedule.base_dir,
        )
        return cls(requests, cfg, sink, on_phase)

    @property
    def on_phase(self) -> PhaseHook | None:
        """Called at every phase edge: ``on_phase(name, "start" | "end", t)``."""
        return self._edges.hook

    @on_phase.setter
    def on_phase(self, hook: PhaseHook | None) -> None:
        self._edges.hook = hook

    @property
    def cut_phases(self) -> set[str]:
        """Phases a stop cut (started, not every request finished)."""
        return self._edges.cut

    # -- running ------------------------------------------------------------------------
    def run(self) -> LoadResult:
        """Run to completion; Ctrl-C (or SIGTERM) stops cleanly and keeps what was recorded."""
        with gcfreeze.held():  # the collector off the clock, for every runner in flight
            return asyncio.run(self._main())

    async def _main(self) -> LoadResult:
        loop = asyncio.get_running_loop()
        handled = threading.current_thread() is threading.main_thread()
        if handled:

            def on_signal(sig: signal.Signals) -> None:
                self.interrupted = True
                self._stop(f"interrupted ({'Ctrl-C' if sig == signal.SIGINT else sig.name})")
                for s in STOP_SIGNALS:  # a second one is a hard stop
                    loop.remove_signal_handler(s)

            try:
                for s in STOP_SIGNALS:
                    loop.add_signal_handler(s, on_signal, s)
            except (NotImplementedError, RuntimeError):
                handled = False
        try:
            return await self.run_async()
        finally:
            if handled:
                for s in STOP_SIGNALS:
                    with contextlib.suppress(Exception):
                        loop.remove_signal_handler(s)

    def _order(self, r: ScheduledRequest) -> tuple[float, float, int]:
        if self.cfg.design.phase_timing == "schedule":
            return (0.0, self.phase_starts[r.phase] + r.send_t, r.index)
        return (float(self.phase_names.index(r.phase)), r.send_t, r.index)

    def _new_record(self, req: ScheduledRequest, scheduled_t: float, status: str) -> RequestRecord:
        measured = self._stage_runner is not None  # stage seconds filled in by the task
        return new_record(req, self.cfg.labels, scheduled_t, status, measured, self._cold)

    async def _sleep_until(self, due: float) -> bool:
        """Wait until ``due`` (monotonic); False when the run was stopped meanwhile."""
        while (delay := due - time.perf_counter()) > 0 and self.stop_reason is None:
            await asyncio.sleep(min(delay, 0.05))
        return self.stop_reason is None

    async def run_async(self) -> LoadResult:
        cfg = self.cfg
        self._loop = asyncio.get_running_loop()
        bodies = {request_id(r): request_body(cfg, r) for r in self.schedule}
        first = sorted((r for r in self.schedule if not r.warmup), key=self._order)
        self._cold = {request_id(r) for r in first[: cfg.design.cold_start_requests]}
        cap = asyncio.Semaphore(cfg.design.max_concurrency) if cfg.design.max_concurrency else None
        ep = cfg.endpoint
        client_opts: dict[str, Any] = {
            "limits": httpx.Limits(max_connections=None, max_keepalive_connections=None),
            "timeout": httpx.Timeout(ep.timeout_s, connect=ep.connect_timeout_s),
            "headers": ep.headers,
        }
        started = time.perf_counter()
        progress = ProgressDisplay(len(self.schedule), cfg.progress, self.counts)
        progress_task = asyncio.create_task(progress.run())

        async def dispatch(client: httpx.AsyncClient, req: ScheduledRequest, due: float) -> bool:
            if not await self._sleep_until(due):
                return False
            rid = request_id(req)
            rec = self._records[rid] = self._new_record(req, due, "")
            task = asyncio.create_task(
                self._one(client, req, bodies[rid], rec, rid in self._cancel, cap)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return True

        try:
            async with httpx.AsyncClient(base_url=ep.url, http1=True, **client_opts) as client:
                self.t_run = self._start_t()  # the client is ready: timeline starts
                self.wall_t_run = time.time() + (self.t_run - time.perf_counter())
                if cfg.design.phase_timing == "schedule":
                    await self._run_timeline(client, dispatch)
                else:
                    await self._run_back_to_back(client, dispatch)
                await self._drain()
        finally:
            self._account_for_the_rest()
            progress.close()
            progress_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress_task
            await self._edges.idle()
            self._edges.close()
        records = [self._records[request_id(r)] for r in self.schedule]
        return LoadResult(
            records, self._chunks, self._summary(records, started), self._rounds, self._prefills
        )

    def _start_t(self) -> float:
        """The first phase's start: a lead after now, or ``design.start_at`` when later."""
        soon = time.perf_counter() + _LEAD_S
        at = self.cfg.design.start_at
        return soon if at is None else max(soon, at)

    async def _run_timeline(self, client: httpx.AsyncClient, dispatch: Any) -> None:
        """One open-loop timeline across phases: nothing waits for a phase to drain."""
        assert self.t_run is not None
        for req in sorted(self.schedule, key=self._order):
            if req.phase not in self._edges.started:
                if not await self._sleep_until(self.t_run + self.phase_starts[req.phase]):
                    break
                self._edges.edge(req.phase, "start", time.perf_counter())
            if not await dispatch(client, req, self.t_run + self._order(req)[1]):
                break

    async def _run_back_to_back(self, client: httpx.AsyncClient, dispatch: Any) -> None:
        for name in self.phase_names:
            if self.stop_reason is not None:
                break
            first = name == self.phase_names[0]
            if first and self.cfg.design.start_at is not None:  # the edge and scrape just before
                await self._sleep_until(self.cfg.design.start_at - _EDGE_LEAD_S)
            hook = self._edges.edge(name, "start", time.perf_counter())
            if hook is not None:
                await asyncio.wrap_future(hook)  # the "before" scrape ends before the first send
            t0 = self._start_t() if first else time.perf_counter() + _LEAD_S
            items = sorted((r for r in self.schedule if r.phase == name), key=self._order)
            for req in items:
                if not await dispatch(client, req, t0 + req.send_t):
                    break
            await self._drain()
            await self._edges.idle()  # the "after" scrape ends before the next phase starts

    def _account_for_the_rest(self) -> None:
        """Whatever happened, every scheduled request leaves with exactly one record, and every
        started phase with an end edge (a cut when the stop came first)."""
        for rid, rec in self._records.items():
            if rec.status == "":
                rec.status = "cancelled" if self.interrupted else "error"
                rec.error = self.stop_reason or "runner ended before the request did"
                rec.done_t = rec.done_t or time.perf_counter()
                self._deliver(rec, [c for c in self._chunks if c.request_id == rid], [], None)
        t_run = self.t_run if self.t_run is not None else time.perf_counter()
        for req in self.schedule:
            rid = request_id(req)
            if rid not in self._records:
                # never dispatched: its nominal time on the run's timeline (back-to-back
                # phases that never started have none; their phase-relative time is kept)
                nominal = t_run + self.phase_starts.get(req.phase, 0.0) + req.send_t
                rec = self._new_record(req, nominal, "not_sent")
                rec.error = self.stop_reason or "not sent"
                self._records[rid] = rec
                self._deliver(rec, [], [], None)
        self._edges.cut_open(self.phase_names, time.perf_counter())

    def _deliver(
        self,
        rec: RequestRecord,
        chunks: list[ChunkTiming],
        rounds: list[RoundRecord],
        prefill: PrefillRecord | None,
    ) -> None:
        if self.sink is None:
            return
        try:
            self.sink(rec, chunks, rounds, prefill)
        except Exception as exc:  # the run goes on; the records are in the result too
            self._stats.sink_failed(exc)

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _one(
        self,
        client: httpx.AsyncClient,
        req: ScheduledRequest,
        body: bytes,
        rec: RequestRecord,
        cancel: bool,
        cap: asyncio.Semaphore | None,
    ) -> None:
        self._stats.dispatch_lags.append(time.perf_counter() - rec.scheduled_t)
        out = Outcome(rec)
        stopped = False
        try:
            if self._stage_runner is not None and req.client_stages:
                # this request's own retrieval / tool stages, before its model call; the
                # dispatcher has moved on (open loop), so slow stages delay only this request
                rec.client_stages = await self._stage_runner.run(req)
            if cap is not None:
                await cap.acquire()
            try:
                self._stats.sending(+1)
                self.counts["sent"] += 1
                await send(client, self.cfg, req, body, out, cancel)
            finally:
                self._stats.sending(-1)
                if cap is not None:
                    cap.release()
        except asyncio.CancelledError:
            # Stopped by the runner: interrupted requests are cancelled; an abort is an error.
            # Either way the stop, not the server, ended it: its phase is cut, not complete.
            stopped = True
            rec.status = "cancelled" if self.interrupted else "error"
            rec.error = self.stop_reason or "cancelled"
            rec.done_t = time.perf_counter()
            rec.output_tokens = sum(c.tokens_in_chunk for c in out.chunks)
            if rec.sent_t is None:
                rec.status = "not_sent"
        self._chunks.extend(out.chunks)
        self._rounds.extend(out.rounds)
        if out.prefill is not None:
            self._prefills.append(out.prefill)
        if rec.sent_t is not None:
            src = self._stats.token_sources
            src[out.token_source] = src.get(out.token_source, 0) + 1
            self._note_connect(out.connect_error)
        self.counts["done"] += 1
        if rec.status != "ok":
            self.counts["failed"] += 1
        self._deliver(rec, out.chunks, out.rounds, out.prefill)
        self._edges.request_done(rec.phase, rec.done_t or time.perf_counter(), stopped)

    def _note_connect(self, failed: bool) -> None:
        if not failed:
            self._connect_errors = 0
            return
        self._connect_errors += 1
        n = self.cfg.design.abort_after_connect_errors
        if n is not None and self._connect_errors >= n:
            self._stop(f"aborted: {n} consecutive connection errors (endpoint down?)")

    def _summary(self, records: list[RequestRecord], started: float) -> LoadSummary:
        planned = any(r.client_stages for r in self.schedule)
        self._stats.notes.extend(self._edges.notes)
        return self._stats.summary(
            self.cfg,
            records,
            stages="run" if self._stage_runner is not None else ("planned" if planned else "none"),
            stop_reason=self.stop_reason,
            interrupted=self.interrupted,
            times={
                "started_t": started,
                "ended_t": time.perf_counter(),
                "t_run": self.t_run,
                "wall_t_run": self.wall_t_run,
            },
            phase_starts=self.phase_starts,
            cut_phases=[p for p in self.phase_names if p in self.cut_phases],
        )


def run_schedule(
    schedule: Sequence[ScheduledRequest], cfg: LoadConfig, sink: Sink | None = None
) -> LoadResult:
    """Replay ``schedule`` against ``cfg.endpoint.url`` open-loop; see ``LoadRunner``."""
    return LoadRunner(schedule, cfg, sink).run()
