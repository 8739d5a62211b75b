"""The pilot as an object: plan the arms, run each on the identical schedule, then analyse.

    >>> from specpilot.pilot import Pilot, load_pilot, default_pilot_path
    >>> pilot = Pilot(load_pilot(default_pilot_path(), quick=True), "runs/demo")
    >>> result = pilot.run()  # doctest: +SKIP
    >>> result.verdict, result.files["html"]  # doctest: +SKIP

(the run starts engines: ``tests/test_pilot_e2e.py`` runs it.)

Order of work: every arm's plan is checked first (one switch at a time, R6) and the llama.cpp
draft file is exported, so a bad config fails before any engine starts. Every pilot runs the
episode design (``pilot.design``, executed by ``pilot.run.episode_run``): every process of every
arm started first (cold starts timed apart), then each load level's episodes replayed on every
arm in a balanced order, one arm serving load at a time (they would share the cores), with
counters and memory scraped at every episode's edges; then each arm's rollback drill,
compatibility suite and quality pass, and every engine stops. A failing arm is recorded and the
pilot goes on; Ctrl-C stops it, and running the same command
again resumes from the file without redoing finished phases.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from specpilot.backends.adapters import adapter_of
from specpilot.backends.facts import model_file
from specpilot.backends.protocol import Backend
from specpilot.pilot.config.file import PilotConfig, PilotConfigError
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.config.sizing import refuse_short_levels
from specpilot.pilot.design import design_arms, design_record, in_place_of, split_schedule
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.eta.remaining import eta_s
from specpilot.pilot.plan.arms import ArmPlan, arm_manifest, check_one_switch, plan_arms
from specpilot.pilot.plan.assets import ASSET_STEPS, prepare
from specpilot.pilot.plan.engines import check_credentials, make_backend
from specpilot.pilot.plan.fit import fit, fit_note, lengths
from specpilot.pilot.plan.noise import episode_plan
from specpilot.pilot.plan.runplans import derive_kv_slots, plain_overrides
from specpilot.pilot.run import finish
from specpilot.pilot.run.capacity import (
    NoSustainableRate,
    baseline_probe,
    capacity_note,
    given_capacity,
    over_capacity,
    refuse_unprobed,
    wants_probe,
)
from specpilot.pilot.run.context import RunPlan, new_record
from specpilot.pilot.run.episode_run import EpisodeRun, episode_runs, reopen_split
from specpilot.pilot.run.eta_plan import plan_for
from specpilot.pilot.run.gates import Gates
from specpilot.pilot.run.looks import check_budget, looks_notes
from specpilot.pilot.run.record import open_pilot, stored_capacity
from specpilot.records import ArmRecord, MetricSnapshot
from specpilot.report.fmt import clean
from specpilot.store import Store
from specpilot.workload import Schedule, build_schedule

if TYPE_CHECKING:
    from specpilot.workload.config import WorkloadConfig


@dataclass
class PilotResult:
    pilot_id: str
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    verdict: str | None = None
    summary: str = ""
    failed_arms: list[str] = field(default_factory=list)


class Pilot:
    """Runs a validated :class:`PilotConfig` into ``out_dir`` (pilot.duckdb + the report); the
    ``PilotContext`` its arms' steps call (``schedule``, ``store`` and ``gates`` are set by
    ``run``)."""

    schedule: Schedule
    level_schedule: Schedule
    store: Store
    gates: Gates

    def __init__(
        self,
        cfg: PilotConfig,
        out_dir: str | Path,
        *,
        base_dir: str | Path | None = None,
        progress: PilotProgress | None = None,
        capacity_rps: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.capacity_given = capacity_rps  # --capacity: the figure instead of the probe
        self.capacity: dict[str, Any] | None = None  # the probe's figures, once prepared
        self.out_dir = Path(out_dir)
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.progress = progress or PilotProgress()
        # the admin switch's token reaches the builtin servers through their environment, so it
        # stays out of launch lines and manifests
        self.admin_token = os.environ.setdefault("SPECPILOT_ADMIN_TOKEN", secrets.token_hex(16))
        self.files: dict[str, dict[str, str]] = {}  # arm -> option -> the prepared file
        self.plans: list[ArmPlan] = []
        self.overrides: dict[str, dict[str, Any]] = {}
        self.started = time.perf_counter()  # reset by run(): the budget counts from there

    @property
    def load_settings(self) -> LoadSettings:
        return self.cfg.load

    # -- planning ------------------------------------------------------------------------
    def prepare(self) -> tuple[list[ArmPlan], Schedule]:
        """Check the arms (R6) and build the schedule; export drafts llama.cpp needs."""
        plans = plan_arms(self.cfg)
        check_one_switch(plans)
        check_credentials(plans)  # before any engine starts, any probe, any measurement
        wl = self.cfg.workload_config()
        base_dir = self.cfg.workload_dir(self.base_dir)
        self.capacity = None
        for p in plans:  # the files each engine needs prepared (backends.adapter.Asset)
            a = adapter_of(p.engine)
            if a is None or p.url is not None or p.spec.options is None:
                continue
            got: dict[str, str] = {}
            for option, asset in a.assets(p.spec.options).items():
                self.progress.step(p.name, ASSET_STEPS[asset.kind])
                got[option] = str(prepare(asset))
            self.files[p.name] = got
            draft = Path(got["draft"]) if "draft" in got else None
            if draft is not None and draft.is_file():
                p.strategy.draft_sha256 = _sha256(draft)
        if wants_probe(self.cfg, wl):  # the rates a fraction of it need it first
            self.capacity = self._capacity(plans, wl, base_dir)
        rps = self.capacity["sustainable_rps"] if self.capacity else None
        if wl.unloaded_slo_groups():
            wl = self._measured_deadlines(wl)
        self.wl = wl
        schedule = build_schedule(wl, base_dir=base_dir, capacity_rps=rps)
        if rps is not None:
            for note in over_capacity(schedule, rps):
                self.progress.note(note)
        return plans, schedule

    def _measured_deadlines(self, wl: WorkloadConfig) -> WorkloadConfig:
        """``wl`` with each ``slo.unloaded_x`` made seconds from the probe's unloaded task
        times; refused where no probe measured them (``--capacity``)."""
        got = (self.capacity or {}).get("deadlines_s") or {}
        groups = wl.unloaded_slo_groups()
        if not got:
            first = sorted(groups)[0]
            raise PilotConfigError(
                f"group {first!r} gives slo.unloaded_x, a multiple of the baseline's unloaded "
                "task time, and no capacity probe measured it"
                + (" (--capacity gives a rate only)" if self.capacity_given else ""),
                fix="leave --capacity out so the probe measures it, or replace that group's "
                "slo.unloaded_x with slo.deadline_s (seconds)",
            )
        for g in sorted(set(groups) - set(got)):  # none of its requests in the schedule
            self.progress.note(f"group {g}: no request to measure, so no deadline (unloaded_x)")
        for g, sec in got.items():
            self.progress.note(
                f"group {g}: deadline {sec:.2f} s ({groups[g]:g}x the baseline's unloaded "
                "task time, measured by the probe)"
            )
        return wl.with_deadlines(got)

    def _fitted(self, t0: float) -> Schedule:
        """The schedule with the levels given as fractions of capacity fitted to the budget
        (``pilot.plan.fit``): planned at their least, then lengthened by what the budget leaves; a
        resumed pilot keeps the lengths it started with."""
        ep = self.cfg.episodes
        assert ep.budget_min is not None and self.capacity is not None
        base_dir = self.cfg.workload_dir(self.base_dir)
        rps = self.capacity["sustainable_rps"]
        names = set(self.wl.utilization_phases())
        rates = {p.name: p.offered_rate for p in self.level_schedule.phases if p.name in names}
        fitted = self.capacity.get("fitted_s")
        if fitted is None:
            levels = lengths(self.level_schedule, names, ep.per_level)
            spent = time.perf_counter() - t0

            def planned(seconds: dict[str, float]) -> float:
                self.level_schedule = build_schedule(
                    self.wl.with_durations(seconds), base_dir=base_dir, capacity_rps=rps
                )
                design = self._design(quiet=True)
                plan = plan_for(self, episode_runs(self.plans, design, "fit"), fresh=True)
                return spent + eta_s(plan, {})

            fitted = fit(levels, planned, ep.budget_min * 60.0)
            self.capacity = {**self.capacity, "fitted_s": fitted}
        self.progress.note(fit_note(fitted, rates, ep.per_level, ep.budget_min))
        return build_schedule(self.wl.with_durations(fitted), base_dir=base_dir, capacity_rps=rps)

    def _capacity(self, plans: list[ArmPlan], wl: WorkloadConfig, base_dir: Path) -> dict[str, Any]:
        """The capacity probe's figures (``pilot.run.capacity``): the stored ones when resuming the
        same pilot (its schedule is rebuilt at the same rate), else measured now."""
        stored = stored_capacity(self.out_dir / "pilot.duckdb", self.cfg.sha256())
        if stored is not None:
            return stored
        base = next(p for p in plans if p.role == "baseline")
        if self.capacity_given is not None:
            return given_capacity(self.capacity_given, base.name)
        refuse_unprobed(self.cfg, base)
        provisional = build_schedule(wl, base_dir=base_dir, capacity_rps=1.0)  # its requests
        try:
            figures = baseline_probe(
                self, base, provisional, wl.unloaded_slo_groups(), self._in_place_arm(plans)
            )
        except NoSustainableRate as exc:
            raise PilotConfigError(
                f"capacity probe of arm {base.name!r}: no sustainable rate, it misses an SLO "
                f"even unloaded: {exc}",
                fix="raise that group's slo.deadline_s, shorten its output, or give the phases "
                "rates (rate:, target_rate:) to measure an overload on purpose",
            ) from None
        except (RuntimeError, statistics.StatisticsError, httpx.HTTPError) as exc:
            # unanswered, no tokens, or the in-place switch refused
            given = "" if wl.unloaded_slo_groups() else " or --capacity"
            raise PilotConfigError(
                f"capacity probe of arm {base.name!r} failed: {exc}",
                fix="check that arm's engine answers the workload's requests (its log), raise "
                f"load.timeout_s, or give the phases rates (rate:, target_rate:){given}",
            ) from None
        self.progress.note(capacity_note(figures))
        return figures

    def _in_place_arm(self, plans: list[ArmPlan]) -> ArmPlan | None:
        """The speculative arm whose processes serve the baseline in place (None: the baseline
        runs on processes of its own, or by URL)."""
        ep = self.cfg.episodes
        if not ep.in_place:
            return None
        base = next(p.name for p in plans if p.role == "baseline")
        name = in_place_of(design_arms(plans, ep), base)
        return next((p for p in plans if p.name == name and p.url is None), None)

    # -- running -------------------------------------------------------------------------
    def run(self) -> PilotResult:
        """Run every arm not yet complete, then the cross-arm gates, analysis and report."""
        t0 = self.started = time.perf_counter()
        self.plans, self.level_schedule = self.prepare()
        self.schedule = self.level_schedule
        self.gates = Gates(self.cfg, self.base_dir)
        ep = self.cfg.episodes
        if ep.fit_budget and self.capacity and self.wl.utilization_phases():
            self.level_schedule = self.schedule = self._fitted(t0)
        design = self._design()  # the episode design: self.schedule cut into episodes
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / "pilot.duckdb"
        with Store(path) as store:
            self.store = store
            pilot = open_pilot(self, store, design)
            design = (pilot.schedule or {}).get("design", design)  # as stored
            runs = self._episode_runs(design, pilot.pilot_id)
            clock = self.progress.clock
            clock.plan = plan_for(self, runs)  # the ETA from here on (pilot.eta.remaining)
            # a budget too small for the least pilot: refused now
            check_budget(design, clock.plan, time.perf_counter() - t0)
            failed = EpisodeRun(self, runs, design).run()
            with clock.timed("cross_arm"):
                finish.cross_arm(store, self.gates, self.plans, self.progress)
            store.add_pilot(
                dataclasses.replace(pilot, status="complete", finished_unix=time.time())
            )
        with clock.timed("report"):
            files, doc = finish.report(path, self.out_dir, self.cfg, self.progress)
        verdicts = doc.get("verdicts", [])
        return PilotResult(
            pilot_id=pilot.pilot_id,
            out_dir=self.out_dir,
            files=files,
            verdict=verdicts[0]["verdict"] if verdicts else None,
            summary=finish.summary(doc, failed, time.perf_counter() - t0),
            failed_arms=failed,
        )

    def _design(self, quiet: bool = False) -> dict[str, Any]:
        """The episode design's record (``pilot.design``), each level of ``self.schedule`` cut
        into its episodes (``quiet``: a trial, its notes not said)."""
        ep = self.cfg.episodes

        for note in refuse_short_levels(self.cfg, self.level_schedule):  # before any start
            if not quiet:
                self.progress.note(note)
        self.schedule = split_schedule(self.level_schedule, ep.per_level)
        arms = design_arms(self.plans, ep)
        base = next(p.name for p in self.plans if p.role == "baseline")
        alpha = (
            1.0 - self.cfg.analysis.ci_level
        )  # the looks share it (analysis.episodes.sequential)
        design = design_record(self.schedule, arms, base, ep.processes, ep, alpha)
        # what the planner predicts from the noise measured before this pilot: the report
        # sets it beside what the pilot achieved (analysis.verdicts.predicted)
        design["prediction"] = clean(episode_plan(self.cfg)) if not quiet else {}
        return design

    def _episode_runs(self, design: dict[str, Any], pilot_id: str) -> list[RunPlan]:
        """The episode design's runs, a resumed in-place pilot's split episodes reopened, the
        looks said."""
        ep = self.cfg.episodes
        # the budget is this command's (--budget), not the design's: a rerun with another one
        # resumes under it
        design.setdefault("looks", {})["budget_min"] = ep.budget_min
        runs = episode_runs(self.plans, design, pilot_id)
        reopen_split(self, runs, design)  # a resumed in-place pilot's split episodes
        for note in looks_notes(design):
            self.progress.note(note)
        return runs

    def record_failure(self, run: RunPlan, exc: BaseException) -> None:
        """The arm's run as failed, with the error, in the pilot file and on the terminal."""
        err = f"{type(exc).__name__}: {exc}"
        self.progress.note(f"arm {run.arm.name} failed: {err}")
        self.progress.clock.drop_run(run.run_id)  # its steps still to come: out of the ETA
        latest = self.arm_record(run)
        self.store.add_arm(
            dataclasses.replace(
                latest, status="failed", error=err[:2000], finished_unix=time.time()
            )
        )

    def snapshot_at_start(self, run: RunPlan, backend: Backend) -> MetricSnapshot | None:
        """Counters and memory of a freshly started arm (the derived alternative reads the
        draft's memory from it before the arm has served a phase); None: the scrape failed."""
        try:
            snap = backend.scrape(run.run_id, run.arm.name, "start", "after")
        except Exception:  # a failed scrape only costs the figure
            return None
        self.store.add_snapshots([snap])
        return snap

    # -- per-arm helpers (used by pilot.run.steps) ------------------------------------------------
    def backend_for(
        self,
        plan: ArmPlan,
        *,
        overrides: dict[str, Any] | None = None,
        port: int | None = None,
        plain: bool = False,
    ) -> Backend:
        """The arm's backend; ``plain`` is the same engine with speculation off (the drill's
        restart), on ``port`` so clients keep their endpoint."""
        over = dict(overrides or self.overrides.get(plan.name, {}))
        if plain:
            over.update(plain_overrides(plan))
        return make_backend(
            plan,
            dtype=self.pinned_format(),
            files=self.files.get(plan.name, {}),
            overrides=over,
            port=port,
        )

    def pinned_format(self) -> str | None:
        """The weight format every builtin arm runs: the one the first started builtin arm's
        engine reported choosing (its manifest's calibration, read from the file, so a resumed
        pilot keeps the first run's choice); None before any builtin engine has reported one
        (each arm then runs its own ``dtype`` option)."""
        arms = [a for a in self.store.records("arms") if a.manifest]
        for a in sorted(arms, key=lambda a: (a.run_order, a.repetition)):
            engine = adapter_of(a.engine)
            chosen = engine.chosen_format(a.manifest) if engine is not None else None
            if chosen:
                return chosen
        return None

    def derived_overrides(self, plan: ArmPlan) -> dict[str, Any]:
        """Option changes the arm's budget derives from another arm's measurement (kv_slots)."""
        over: dict[str, Any] = {}
        if plan.role == "alternative" and plan.spec.budget.derive == "kv_slots":
            over = derive_kv_slots(self.store, plan, self.plans)
        self.overrides[plan.name] = over
        return over

    def manifest(
        self, backend: Backend, plan: ArmPlan, overrides: dict[str, Any]
    ) -> dict[str, Any]:
        """``pilot.plan.arms.arm_manifest`` of the started backend."""
        return arm_manifest(backend.describe().to_dict(), plan, overrides)

    def arm_record(self, run: RunPlan) -> ArmRecord:
        found = self.store.records("arms", run_id=run.run_id)
        if found:
            return found[0]
        return new_record(run, self.store.records("pilots")[0].pilot_id)


def _sha256(path: Path) -> str:
    mf = model_file("draft", path)
    return mf.sha256 if mf is not None and mf.sha256 else ""


def default_out_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")
