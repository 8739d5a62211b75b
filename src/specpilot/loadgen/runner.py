"""The open-loop runner: send each scheduled request at its time, whatever came before.

Every scheduled request ends as exactly one RequestRecord. Records go to ``sink`` as they
finish, from a writer thread (a slow store must not delay the next send); the same records
come back in the result. One clock: ``time.perf_counter()``.

Timeline of one request: the dispatcher starts its task at ``scheduled_t`` (the dispatch lag,
task start - scheduled_t, is the generator's own timing error and decides trustworthiness);
the task runs the request's client-side stages (retrieval, tool calls; measured seconds go to
``RequestRecord.client_stages``), waits for the concurrency cap if there is one, then sends
(``sent_t``). The send lag, sent_t - scheduled_t - stage seconds, is the cap's wait.
Simulated stages are non-blocking waits; a real retrieval (BM25) runs on this event loop: the
builtin document set costs ~0.1 ms, a large one (~5k documents: ~20 ms) delays the requests
due meanwhile, which the dispatch lag shows and the trustworthiness check flags.

Phases share one open-loop timeline by default: phase P starts ``cfg.phase_starts[P]`` seconds
after the run's start, whether or not the previous phase's requests have finished (a burst that
overloads the server spills into the next phase, as in production). ``phase_timing =
"back_to_back"`` instead starts each phase when the previous one has drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx

from specpilot.loadgen.client import LoadConfig, Outcome, request_body, send
from specpilot.loadgen.progress import Progress
from specpilot.records import ChunkTiming, RequestRecord, ScheduledRequest

if TYPE_CHECKING:
    from specpilot.workload.schedule import Schedule

Sink = Callable[[RequestRecord, list[ChunkTiming]], None]
STATUSES = ("ok", "timeout", "rejected", "error", "cancelled", "not_sent")
_LEAD_S = 0.02  # phase start is this far after the dispatcher is ready


@dataclass
class LoadSummary:
    """What a platform engineer checks before trusting a run."""

    run_id: str
    scheduled: int
    status_counts: dict[str, int]
    dispatch_lag_p50_s: float | None
    dispatch_lag_p99_s: float | None
    dispatch_lag_max_s: float | None
    send_lag_p99_s: float | None  # sent - scheduled - client stages: the concurrency cap's wait
    lag_threshold_s: float
    trustworthy: bool
    reasons: list[str] = field(default_factory=list)
    concurrency_cap: int | None = None
    max_in_flight: int = 0
    token_count_source: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str | None = None
    sink_errors: int = 0
    started_t: float = 0.0
    ended_t: float = 0.0
    phase_timing: str = "schedule"
    phase_starts_s: dict[str, float] = field(default_factory=dict)  # "schedule" timing only
    client_stages: str = "none"  # run (measured) | planned (not run, planned seconds kept) | none
    notes: list[str] = field(default_factory=list)  # facts about the run that do not void it

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class LoadResult:
    records: list[RequestRecord]
    chunks: list[ChunkTiming]
    summary: LoadSummary


def quantile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (no interpolation: a p99 is a lag that really happened)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def request_id(req: ScheduledRequest) -> str:
    return f"{req.phase}-{req.index:06d}"


def phase_starts_for(
    phases: Iterable[Any], selected: Iterable[str] | None = None
) -> dict[str, float]:
    """Start offsets (s) of the selected phases on one timeline, in plan order.

    ``phases`` are a schedule's ``PhaseInfo`` (anything with ``name`` and ``duration_s``). A
    phase left out of the selection takes no time, so running only ``peak`` does not first wait
    through an off-peak phase; with every phase selected the offsets are ``PhaseInfo.start_s``.

        >>> from types import SimpleNamespace as P
        >>> plan = [P(name="warmup", duration_s=2.0), P(name="off", duration_s=60.0),
        ...         P(name="peak", duration_s=30.0)]
        >>> phase_starts_for(plan), phase_starts_for(plan, ["warmup", "peak"])
        ({'warmup': 0.0, 'off': 2.0, 'peak': 62.0}, {'warmup': 0.0, 'peak': 2.0})
    """
    keep = None if selected is None else set(selected)
    out: dict[str, float] = {}
    t = 0.0
    for p in phases:
        if keep is None or p.name in keep:
            out[p.name] = round(t, 6)
            t += float(p.duration_s)
    return out


class _SinkThread:
    def __init__(self, sink: Sink | None) -> None:
        self.sink = sink
        self.errors = 0
        self.first_error: BaseException | None = None
        self.q: queue.SimpleQueue[tuple[RequestRecord, list[ChunkTiming]] | None] = (
            queue.SimpleQueue()
        )
        self.thread = threading.Thread(target=self._run, daemon=True, name="loadgen-sink")
        if sink is not None:
            self.thread.start()

    def put(self, rec: RequestRecord, chunks: list[ChunkTiming]) -> None:
        if self.sink is not None:
            self.q.put((rec, chunks))

    def _run(self) -> None:
        assert self.sink is not None
        while (item := self.q.get()) is not None:
            try:
                self.sink(*item)
            except Exception as exc:  # the run goes on; the records are in the result too
                self.errors += 1
                self.first_error = self.first_error or exc

    def close(self) -> None:
        if self.sink is not None:
            self.q.put(None)
            self.thread.join()


class LoadRunner:
    """Replays a schedule against ``cfg.url``.

        >>> runner = LoadRunner(schedule, LoadConfig(url="http://127.0.0.1:8080"))  # doctest: +SKIP
        >>> result = runner.run()                                          # doctest: +SKIP
        >>> result.summary.status_counts, result.summary.trustworthy      # doctest: +SKIP

    ``send_t`` is relative to its phase's start. With ``cfg.phase_timing == "schedule"`` (the
    default) a phase starts at ``cfg.phase_starts[phase]`` on the run's timeline; a schedule of
    one phase needs no starts, several do (``LoadRunner.for_schedule`` fills them in from a
    ``Schedule``). With ``"back_to_back"`` phases run in order of first appearance, each one
    starting when the previous one has drained.
    """

    def __init__(
        self, schedule: Sequence[ScheduledRequest], cfg: LoadConfig, sink: Sink | None = None
    ) -> None:
        self.schedule = list(schedule)
        self.cfg = cfg
        self.sink = sink
        ids = [request_id(r) for r in self.schedule]
        if len(set(ids)) != len(ids):
            raise ValueError("schedule has duplicate (phase, index) pairs")
        rng = random.Random(cfg.seed)
        self._cancel = {rid for rid in ids if rng.random() < cfg.cancel_fraction}
        self._phase_names = list(dict.fromkeys(r.phase for r in self.schedule))
        self._starts: dict[str, float] = {}
        if cfg.phase_timing == "schedule":
            starts = dict(cfg.phase_starts or {})
            missing = [n for n in self._phase_names if n not in starts]
            if missing and len(self._phase_names) == 1:
                starts[missing[0]] = 0.0
            elif missing:
                raise ValueError(
                    f"phases {', '.join(missing)} have no start time: set LoadConfig.phase_starts "
                    "(phase_starts_for(schedule.phases, ...)), use LoadRunner.for_schedule, or "
                    "phase_timing='back_to_back'"
                )
            self._starts = {n: float(starts[n]) for n in self._phase_names}
        self._notes: list[str] = []
        self._stage_runner: Any = None
        stage_names = {n for r in self.schedule for n in r.client_stages}
        if stage_names and cfg.run_stages:
            from specpilot.workload.stages import StageRunner  # indexes load here, off the clock

            self._stage_runner = StageRunner(cfg.stages, cfg.stages_base_dir)
            unknown = sorted(stage_names - set(cfg.stages))
            if unknown:
                self._notes.append(
                    f"client stages {', '.join(unknown)} have no spec in LoadConfig.stages: "
                    "run as waits of their planned seconds"
                )
        self._records: dict[str, RequestRecord] = {}
        self._chunks: list[ChunkTiming] = []
        self._dispatch_lags: list[float] = []
        self._sources: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._interrupted = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._max_in_flight = 0
        self._connect_errors = 0
        self.counts = {"sent": 0, "done": 0, "failed": 0}

    # -- control -------------------------------------------------------------------------
    def stop(self, reason: str = "stopped") -> None:
        """Stop sending (thread-safe); in-flight requests end as ``cancelled``."""
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop, reason)
        else:
            self._stop(reason)

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
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
    ) -> LoadRunner:
        """A runner for (a selection of) a workload ``Schedule``: phase starts and client-stage
        specs come from the schedule unless ``cfg`` sets them."""
        requests = schedule.select(phases, warmup=warmup)
        present = {r.phase for r in requests}
        starts = phase_starts_for(p for p in schedule.phases if p.name in present)
        cfg = replace(
            cfg,
            phase_starts=cfg.phase_starts if cfg.phase_starts is not None else starts,
            stages=cfg.stages or dict(schedule.stages),
            stages_base_dir=cfg.stages_base_dir or schedule.base_dir,
        )
        return cls(requests, cfg, sink)

    # -- running ------------------------------------------------------------------------
    def run(self) -> LoadResult:
        """Run to completion; Ctrl-C stops cleanly and keeps what was recorded."""
        return asyncio.run(self._main())

    async def _main(self) -> LoadResult:
        loop = asyncio.get_running_loop()
        handled = threading.current_thread() is threading.main_thread()
        if handled:

            def on_sigint() -> None:
                self._interrupted = True
                self._stop("interrupted (Ctrl-C)")
                loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C is a hard stop

            try:
                loop.add_signal_handler(signal.SIGINT, on_sigint)
            except (NotImplementedError, RuntimeError):
                handled = False
        try:
            return await self.run_async()
        finally:
            if handled:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signal.SIGINT)

    async def run_async(self) -> LoadResult:
        cfg = self.cfg
        self._loop = asyncio.get_running_loop()
        sink = _SinkThread(self.sink)
        bodies = {request_id(r): request_body(cfg, r) for r in self.schedule}
        rank = {n: i for i, n in enumerate(self._phase_names)}

        def order(r: ScheduledRequest) -> tuple[float, float, int]:
            if cfg.phase_timing == "schedule":
                return (0.0, self._starts[r.phase] + r.send_t, r.index)
            return (float(rank[r.phase]), r.send_t, r.index)

        cold = {
            request_id(r)
            for r in sorted((r for r in self.schedule if not r.warmup), key=order)[
                : cfg.cold_start_requests
            ]
        }
        cap = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        timeout = httpx.Timeout(cfg.timeout_s, connect=cfg.connect_timeout_s, pool=None)
        started = time.perf_counter()
        t_run = started + _LEAD_S
        progress = Progress(len(self.schedule), cfg.progress, self.counts)
        progress_task = asyncio.create_task(progress.run())

        def new_record(req: ScheduledRequest, scheduled_t: float, status: str) -> RequestRecord:
            rid = request_id(req)
            return RequestRecord(
                run_id=cfg.run_id,
                arm=cfg.arm,
                phase=req.phase,
                task_group=req.group,
                prompt_id=req.prompt_id,
                request_id=rid,
                scheduled_t=scheduled_t,
                status=status,
                deadline_s=req.deadline_s,
                ttft_slo_s=req.ttft_slo_s,
                # measured seconds when the stages run (filled in by the request's task),
                # else the planned ones
                client_stages={} if self._stage_runner is not None else dict(req.client_stages),
                warmup=req.warmup,
                cold_start=rid in cold,
            )

        async def dispatch(client: httpx.AsyncClient, req: ScheduledRequest, due: float) -> bool:
            while (delay := due - time.perf_counter()) > 0 and self._stop_reason is None:
                await asyncio.sleep(min(delay, 0.05))
            if self._stop_reason is not None:
                return False
            rid = request_id(req)
            rec = self._records[rid] = new_record(req, due, "")
            task = asyncio.create_task(
                self._one(client, req, bodies[rid], rec, rid in self._cancel, cap, sink)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return True

        try:
            async with httpx.AsyncClient(
                base_url=cfg.url, limits=limits, timeout=timeout, headers=cfg.headers, http1=True
            ) as client:
                t_run = time.perf_counter() + _LEAD_S  # the client is ready: the timeline starts
                if cfg.phase_timing == "schedule":
                    # one open-loop timeline across phases: nothing waits for a phase to drain
                    for req in sorted(self.schedule, key=order):
                        if not await dispatch(client, req, t_run + order(req)[1]):
                            break
                else:
                    for name in self._phase_names:
                        if self._stop_reason is not None:
                            break
                        t0 = time.perf_counter() + _LEAD_S
                        items = sorted((r for r in self.schedule if r.phase == name), key=order)
                        for req in items:
                            if not await dispatch(client, req, t0 + req.send_t):
                                break
                        await self._drain()
                await self._drain()
        finally:
            # Whatever happened, every scheduled request leaves with exactly one record.
            for rid, task_rec in self._records.items():
                if task_rec.status == "":
                    task_rec.status = "cancelled" if self._interrupted else "error"
                    task_rec.error = self._stop_reason or "runner ended before the request did"
                    task_rec.done_t = task_rec.done_t or time.perf_counter()
                    sink.put(task_rec, [c for c in self._chunks if c.request_id == rid])
            for req in self.schedule:
                rid = request_id(req)
                if rid not in self._records:
                    # never dispatched: its nominal time on the run's timeline (back-to-back
                    # phases that never started have none; their phase-relative time is kept)
                    nominal = t_run + self._starts.get(req.phase, 0.0) + req.send_t
                    rec = new_record(req, nominal, "not_sent")
                    rec.error = self._stop_reason or "not sent"
                    self._records[rid] = rec
                    sink.put(rec, [])
            progress.close()
            progress_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress_task
            await asyncio.to_thread(sink.close)
        records = [self._records[request_id(r)] for r in self.schedule]
        return LoadResult(records, self._chunks, self._summary(records, started, sink))

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
        sink: _SinkThread,
    ) -> None:
        self._dispatch_lags.append(time.perf_counter() - rec.scheduled_t)
        out = Outcome(rec)
        try:
            if self._stage_runner is not None and req.client_stages:
                # this request's own retrieval / tool stages, before its model call; the
                # dispatcher has moved on (open loop), so slow stages delay only this request
                rec.client_stages = await self._stage_runner.run(req)
            if cap is not None:
                await cap.acquire()
            try:
                self._in_flight += 1
                self._max_in_flight = max(self._max_in_flight, self._in_flight)
                self.counts["sent"] += 1
                await send(client, self.cfg, req, body, out, cancel)
            finally:
                self._in_flight -= 1
                if cap is not None:
                    cap.release()
        except asyncio.CancelledError:
            # Stopped by the runner: interrupted requests are cancelled; an abort is an error.
            rec.status = "cancelled" if self._interrupted else "error"
            rec.error = self._stop_reason or "cancelled"
            rec.done_t = time.perf_counter()
            rec.output_tokens = sum(c.tokens_in_chunk for c in out.chunks)
            if rec.sent_t is None:
                rec.status = "not_sent"
        chunks = out.chunks
        self._chunks.extend(chunks)
        if rec.sent_t is not None:
            self._sources[out.token_source] = self._sources.get(out.token_source, 0) + 1
            if out.connect_error:
                self._connect_errors += 1
                n = self.cfg.abort_after_connect_errors
                if n is not None and self._connect_errors >= n:
                    self._stop(f"aborted: {n} consecutive connection errors (endpoint down?)")
            else:
                self._connect_errors = 0
        self.counts["done"] += 1
        if rec.status != "ok":
            self.counts["failed"] += 1
        sink.put(rec, chunks)

    def _summary(
        self, records: list[RequestRecord], started: float, sink: _SinkThread
    ) -> LoadSummary:
        cfg = self.cfg
        counts = {s: 0 for s in STATUSES}
        for r in records:
            counts[r.status] = counts.get(r.status, 0) + 1
        ran = self._stage_runner is not None
        send_lags = [
            r.sent_t - r.scheduled_t - (sum(r.client_stages.values()) if ran else 0.0)
            for r in records
            if r.sent_t is not None
        ]
        lags = self._dispatch_lags
        p99 = quantile(lags, 0.99)
        reasons = []
        if p99 is not None and p99 > cfg.lag_threshold_s:
            reasons.append(
                f"p99 dispatch lag {p99 * 1e3:.1f} ms > {cfg.lag_threshold_s * 1e3:.1f} ms: "
                "the generator, not the server, shaped the arrivals"
            )
        if self._stop_reason is not None:
            reasons.append(f"run stopped early: {self._stop_reason}")
        if sink.errors:
            reasons.append(f"{sink.errors} records failed to reach the sink: {sink.first_error!r}")
        return LoadSummary(
            run_id=cfg.run_id,
            scheduled=len(records),
            status_counts=counts,
            dispatch_lag_p50_s=quantile(lags, 0.5),
            dispatch_lag_p99_s=p99,
            dispatch_lag_max_s=max(lags) if lags else None,
            send_lag_p99_s=quantile(send_lags, 0.99),
            lag_threshold_s=cfg.lag_threshold_s,
            trustworthy=not reasons,
            reasons=reasons,
            concurrency_cap=cfg.max_concurrency,
            max_in_flight=self._max_in_flight,
            token_count_source=dict(self._sources),
            interrupted=self._interrupted,
            stop_reason=self._stop_reason,
            sink_errors=sink.errors,
            started_t=started,
            ended_t=time.perf_counter(),
            phase_timing=cfg.phase_timing,
            phase_starts_s=dict(self._starts),
            client_stages=(
                "run"
                if ran
                else ("planned" if any(r.client_stages for r in self.schedule) else "none")
            ),
            notes=list(self._notes),
        )


def run_schedule(
    schedule: Sequence[ScheduledRequest], cfg: LoadConfig, sink: Sink | None = None
) -> LoadResult:
    """Replay ``schedule`` against ``cfg.url`` open-loop; see ``LoadRunner``."""
    return LoadRunner(schedule, cfg, sink).run()
