"""The pilot as an object: plan the arms, run each on the identical schedule, then analyse.

    >>> from specpilot.pilot import Pilot, load_pilot, default_pilot_path
    >>> pilot = Pilot(load_pilot(default_pilot_path(), quick=True), "runs/demo")
    >>> result = pilot.run()  # doctest: +SKIP
    >>> result.verdict, result.files["html"]  # doctest: +SKIP

(the run starts engines: ``tests/test_pilot_e2e.py`` runs it.)

Order of work: every arm's plan is checked first (one switch at a time, R6), each process of an
arm that gives ``devices:`` is placed on its GPUs with their free memory checked
(``pilot.plan.placement``), and the llama.cpp draft file is exported, so a bad config fails
before any engine starts. Every pilot runs the
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
from specpilot.pilot.config.file import PilotConfig, PilotConfigError
from specpilot.pilot.config.settings import LoadSettings
from specpilot.pilot.config.sizing import refuse_short_levels
from specpilot.pilot.design import design_arms, design_record, in_place_of, split_schedule
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.eta.remaining import eta_s
from specpilot.pilot.plan.arms import ArmPlan, check_one_switch, plan_arms
from specpilot.pilot.plan.assets import ASSET_STEPS, prepare
from specpilot.pilot.plan.devices import placed_plans
from specpilot.pilot.plan.engines import check_credentials, check_replicas
from specpilot.pilot.plan.fit import fit, fit_note, lengths
from specpilot.pilot.plan.noise import episode_plan
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
from specpilot.pilot.run.context import RunPlan
from specpilot.pilot.run.episode_run import EpisodeRun, episode_runs, reopen_split
from specpilot.pilot.run.eta_plan import Planning, plan_for
from specpilot.pilot.run.gates import Gates
from specpilot.pilot.run.looks import check_budget, looks_notes
from specpilot.pilot.run.record import open_pilot, stored_capacity
from specpilot.pilot.run.session import PilotSession
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


@dataclass(frozen=True)
class Prepared:
    """What the pilot decides before anything is measured (``Pilot.prepare``): every arm's plan
    (R6 checked), the files each engine needs, the capacity probe's figures, the workload (its
    deadlines measured where it asks for them) and its schedule by load level."""

    plans: list[ArmPlan]
    files: dict[str, dict[str, str]]  # arm -> option -> the prepared file (pilot.plan.assets)
    capacity: dict[str, Any] | None  # the probe's figures (None: not probed)
    wl: WorkloadConfig
    level_schedule: Schedule


@dataclass(frozen=True)
class Probing:
    """What the capacity probe reads of the pilot (``pilot.run.capacity.ProbeContext``)."""

    files: dict[str, dict[str, str]]
    progress: PilotProgress
    load_settings: LoadSettings
    admin_token: str


class Pilot:
    """Runs a validated :class:`PilotConfig` into ``out_dir`` (pilot.duckdb + the report):
    ``prepare`` decides what runs, ``run`` opens the pilot file and runs it as one
    ``PilotSession`` (``pilot.run.session``), built whole."""

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
        self.out_dir = Path(out_dir)
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self.progress = progress or PilotProgress()
        # the admin switch's token reaches the builtin servers through their environment, so it
        # stays out of launch lines and manifests
        self.admin_token = os.environ.setdefault("SPECPILOT_ADMIN_TOKEN", secrets.token_hex(16))
        self.gates = Gates(cfg, self.base_dir)

    # -- planning ------------------------------------------------------------------------
    def prepare(self) -> Prepared:
        """Check the arms (R6), prepare the files each engine needs, probe the capacity where
        the rates need it, and build the schedule by load level."""
        plans = plan_arms(self.cfg)
        check_one_switch(plans)
        check_credentials(plans)  # before any engine starts, any probe, any measurement
        plans, placed = placed_plans(plans, self.cfg)  # each process's GPUs, checked now
        for line in placed:
            self.progress.note(line)
        for note in check_replicas(plans):  # replicas of one arm: one configuration
            self.progress.note(note)
        wl = self.cfg.workload_config()
        base_dir = self.cfg.workload_dir(self.base_dir)
        files = {p.name: self._assets(p) for p in plans if _has_assets(p)}
        capacity = None
        if wants_probe(self.cfg, wl):  # the rates a fraction of it need it first
            capacity = self._capacity(plans, files, wl, base_dir)
        rps = capacity["sustainable_rps"] if capacity else None
        if wl.unloaded_slo_groups():
            wl = self._measured_deadlines(wl, capacity)
        schedule = build_schedule(wl, base_dir=base_dir, capacity_rps=rps)
        if rps is not None:
            for note in over_capacity(schedule, rps):
                self.progress.note(note)
        return Prepared(plans, files, capacity, wl, schedule)

    def _assets(self, p: ArmPlan) -> dict[str, str]:
        """The files ``p``'s engine needs, prepared (``backends.adapter.Asset``); a draft file's
        sha256 is the arm's strategy's."""
        a = adapter_of(p.engine)
        assert a is not None and p.spec.options is not None
        got: dict[str, str] = {}
        for option, asset in a.assets(p.spec.options).items():
            self.progress.step(p.name, ASSET_STEPS[asset.kind])
            got[option] = str(prepare(asset))
        draft = Path(got["draft"]) if "draft" in got else None
        if draft is not None and draft.is_file():
            p.strategy.draft_sha256 = _sha256(draft)
        return got

    def _measured_deadlines(
        self, wl: WorkloadConfig, capacity: dict[str, Any] | None
    ) -> WorkloadConfig:
        """``wl`` with each ``slo.unloaded_x`` made seconds from the probe's unloaded task
        times; refused where no probe measured them (``--capacity``)."""
        got = (capacity or {}).get("deadlines_s") or {}
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

    def _fitted(self, prep: Prepared, t0: float) -> Prepared:
        """The schedule with the levels given as fractions of capacity fitted to the budget
        (``pilot.plan.fit``): planned at their least, then lengthened by what the budget leaves; a
        resumed pilot keeps the lengths it started with (the capacity figures' ``fitted_s``, stored)."""
        ep, capacity = self.cfg.episodes, prep.capacity
        assert ep.budget_min is not None and capacity is not None
        base_dir = self.cfg.workload_dir(self.base_dir)
        rps = capacity["sustainable_rps"]
        names = set(prep.wl.utilization_phases())
        rates = {p.name: p.offered_rate for p in prep.level_schedule.phases if p.name in names}
        fitted = capacity.get("fitted_s")
        if fitted is None:
            levels = lengths(prep.level_schedule, names, ep.per_level)
            spent = time.perf_counter() - t0

            def planned(seconds: dict[str, float]) -> float:
                trial = build_schedule(
                    prep.wl.with_durations(seconds), base_dir=base_dir, capacity_rps=rps
                )
                schedule, design = self._design(prep.plans, trial, quiet=True)
                ahead = Planning(self.cfg, self.gates, schedule, trial, capacity)
                return spent + eta_s(plan_for(ahead, episode_runs(prep.plans, design, "fit")), {})

            fitted = fit(levels, planned, ep.budget_min * 60.0)
        self.progress.note(fit_note(fitted, rates, ep.per_level, ep.budget_min))
        levels_now = build_schedule(
            prep.wl.with_durations(fitted), base_dir=base_dir, capacity_rps=rps
        )
        # the lengths kept with the pilot's capacity figures: a resumed pilot fits no more
        return dataclasses.replace(
            prep, capacity={**capacity, "fitted_s": fitted}, level_schedule=levels_now
        )

    def _capacity(
        self,
        plans: list[ArmPlan],
        files: dict[str, dict[str, str]],
        wl: WorkloadConfig,
        base_dir: Path,
    ) -> dict[str, Any]:
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
            probing = Probing(files, self.progress, self.cfg.load, self.admin_token)
            figures = baseline_probe(
                probing, base, provisional, wl.unloaded_slo_groups(), self._in_place_arm(plans)
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
        t0 = time.perf_counter()
        prep = self.prepare()
        ep = self.cfg.episodes
        if ep.fit_budget and prep.capacity and prep.wl.utilization_phases():
            prep = self._fitted(prep, t0)
        levels = prep.level_schedule
        schedule, design = self._design(prep.plans, levels)  # each level cut into episodes
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / "pilot.duckdb"
        with Store(path) as store:
            s = PilotSession(
                self.cfg,
                store=store,
                gates=self.gates,
                plans=prep.plans,
                files=prep.files,
                capacity=prep.capacity,
                level_schedule=levels,
                schedule=schedule,
                progress=self.progress,
                admin_token=self.admin_token,
                started=t0,
            )
            pilot = open_pilot(s, store, design)
            design = (pilot.schedule or {}).get("design", design)  # as stored
            runs = self._episode_runs(prep.plans, design, pilot.pilot_id, s)
            clock = self.progress.clock
            clock.plan = plan_for(s, runs, resumed=s)  # the ETA from here on (pilot.eta)
            # a budget too small for the least pilot: refused now
            check_budget(design, clock.plan, time.perf_counter() - t0)
            failed = EpisodeRun(s, runs, design).run()
            with clock.timed("cross_arm"):
                finish.cross_arm(store, self.gates, prep.plans, self.progress)
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

    def _design(
        self, plans: list[ArmPlan], levels: Schedule, quiet: bool = False
    ) -> tuple[Schedule, dict[str, Any]]:
        """The schedule the runs replay (each level of ``levels`` cut into its episodes) and
        the episode design's record (``pilot.design``; ``quiet``: a trial, its notes not said)."""
        ep = self.cfg.episodes
        for note in refuse_short_levels(self.cfg, levels):  # before any start
            if not quiet:
                self.progress.note(note)
        schedule = split_schedule(levels, ep.per_level)
        arms = design_arms(plans, ep)
        base = next(p.name for p in plans if p.role == "baseline")
        alpha = 1.0 - self.cfg.analysis.ci_level  # the looks share it (analysis.episodes)
        design = design_record(schedule, arms, base, ep.processes, ep, alpha)
        # what the planner predicts from the noise measured before this pilot: the report
        # sets it beside what the pilot achieved (analysis.verdicts.predicted)
        design["prediction"] = clean(episode_plan(self.cfg)) if not quiet else {}
        return schedule, design

    def _episode_runs(
        self,
        plans: list[ArmPlan],
        design: dict[str, Any],
        pilot_id: str,
        s: PilotSession,
    ) -> list[RunPlan]:
        """The episode design's runs, a resumed in-place pilot's split episodes reopened, the
        looks said."""
        ep = self.cfg.episodes
        # the budget is this command's (--budget), not the design's: a rerun with another one
        # resumes under it
        design.setdefault("looks", {})["budget_min"] = ep.budget_min
        runs = episode_runs(plans, design, pilot_id)
        reopen_split(s, runs, design)  # a resumed in-place pilot's split episodes
        for note in looks_notes(design):
            self.progress.note(note)
        return runs


def _sha256(path: Path) -> str:
    mf = model_file("draft", path)
    return mf.sha256 if mf is not None and mf.sha256 else ""


def default_out_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def _has_assets(p: ArmPlan) -> bool:
    """An arm whose engine specpilot starts with options (its files may need preparing)."""
    return adapter_of(p.engine) is not None and p.url is None and p.spec.options is not None
