"""A finished pilot measured again (``specpilot rerun RUN_DIR --out NEW_DIR``): the config
stored in its pilot file, changed only where ``--set`` says (``pilot.plan.rerun``), on the same
schedule with the same seed, capacity figures and deadlines, then compared cell by cell.

How: the new pilot file is seeded with a record that holds the new config and the previous
run's schedule (its requests, episode design, capacity probe's figures and fitted lengths), and
the pilot then runs it as it resumes any pilot file: nothing is probed or fitted again, and the
schedule it rebuilds from the config must be the stored one request for request (checked here
first, with the first differing request named). The record also keeps the previous run's
summary (``report.compare.summary_of``) under ``schedule.previous_run``, so the new report's
"Compared with the previous run" section is rebuilt by ``specpilot report`` from the file alone.

Relative paths of an inline workload (traces, prompt files, documents) start at the original
pilot file's folder. A pilot file records it (``schedule.workload_dir``) since this command
exists; for an older one the rerun tries the embedded default pilot's folder and the working
directory, keeps the first where every file is, and otherwise refuses naming the file and
``--base-dir``. Whichever folder it takes, the schedule check above is what guarantees the
same traffic.

    >>> rr = Rerun("runs/before", [], "runs/after")
    >>> rr.plan().change  # doctest: +SKIP
    'nothing: the same config'
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specpilot import __version__
from specpilot.backends.facts import hardware_facts
from specpilot.errors import InputFileError
from specpilot.pilot.config.file import PilotConfig, PilotConfigError, default_pilot_path
from specpilot.pilot.config.files import missing_models
from specpilot.pilot.design import split_schedule
from specpilot.pilot.eta.progress import PilotProgress
from specpilot.pilot.plan.rerun import (
    Setting,
    change_of,
    given,
    parse_setting,
    stored_config,
    with_settings,
)
from specpilot.pilot.run.runner import Pilot, PilotResult
from specpilot.records import PilotRecord
from specpilot.report.compare import first_difference, schedule_fingerprint, summary_of
from specpilot.store import PilotFileError, Store
from specpilot.workload import Schedule, build_schedule
from specpilot.workload.config import (
    BM25StageModel,
    RequestLogArrival,
    TraceArrival,
    WorkloadConfig,
)

__all__ = ["Previous", "Rerun", "RerunPlan", "pilot_file_of"]

PILOT_FILE = "pilot.duckdb"
_SHIPPED_DOCS = BM25StageModel.model_fields["docs"].default  # the documents specpilot ships


def pilot_file_of(run: str | Path) -> Path:
    """The pilot file of a run folder (or the file itself); refused where there is none."""
    p = Path(run)
    f = p / PILOT_FILE if p.is_dir() else p
    if f.is_file():
        return f
    where = f"{p} has no {PILOT_FILE}" if p.is_dir() else f"{p}: no such run folder or pilot file"
    raise InputFileError(
        f"rerun: {where}",
        fix="give the folder `specpilot pilot --out` (or `specpilot rerun --out`) wrote: it "
        f"holds {PILOT_FILE} beside report.json; or that {PILOT_FILE} itself",
    )


@dataclass(frozen=True)
class Previous:
    """The run being rerun: its pilot file, record and report document."""

    path: Path
    record: PilotRecord
    report: dict[str, Any]
    report_path: Path | None

    @classmethod
    def open(cls, run: str | Path) -> Previous:
        path = pilot_file_of(run)
        try:
            with Store(path, read_only=True) as st:
                records = st.records("pilots")
        except PilotFileError as exc:  # another schema version: the store says which and why
            raise PilotFileError(f"rerun: {exc.message}", fix=_older_fix(path) or exc.fix) from None
        if not records:
            raise InputFileError(f"rerun: {path} holds no pilot (no row in its pilots table)")
        rec = records[0]
        sched = rec.schedule or {}
        if not isinstance(sched.get("requests"), list):
            raise InputFileError(
                f"rerun: {path} (pilot {rec.pilot_id}, specpilot {rec.specpilot_version}) "
                "stored no schedule, and a rerun replays the stored one",
                fix="run that pilot's config again with `specpilot pilot FILE`; its report "
                "can be set beside the new one by eye only",
            )
        if rec.status != "complete":
            raise InputFileError(
                f"rerun: {path}: pilot {rec.pilot_id} is {rec.status}, not finished: a rerun "
                "compares two finished runs",
                fix="finish it first: the command that made it, run again with the same --out, "
                "resumes it",
            )
        doc, where = _report_of(path, rec)
        return cls(path, rec, doc, where)


def _older_fix(path: Path) -> str | None:
    """The fix for a pilot file older than this reader (None: not that)."""
    import duckdb

    from specpilot.store.schema import SCHEMA_VERSION, file_version

    try:
        with duckdb.connect(str(path), read_only=True) as con:
            version = file_version(con, str(path))
    except (duckdb.Error, PilotFileError):
        return None
    if version is None or version >= SCHEMA_VERSION:
        return None
    return (
        f"a rerun replays the config and schedule that a pilot file of schema version "
        f"{SCHEMA_VERSION} stores, and this version-{version} file holds neither: run that "
        "pilot again from its config file (specpilot pilot FILE --out DIR)"
    )


def _report_of(path: Path, rec: PilotRecord) -> tuple[dict[str, Any], Path | None]:
    """The previous run's report.json beside its pilot file, else built from the file."""
    f = path.with_name("report.json")
    if f.is_file():
        doc = json.loads(f.read_text("utf-8"))
        if (doc.get("pilot") or {}).get("pilot_id") == rec.pilot_id:
            return doc, f
    from specpilot.analysis.config import AnalysisConfig
    from specpilot.report import build_report
    from specpilot.store import read_pilot

    cfg = AnalysisConfig.model_validate((rec.config or {}).get("analysis") or {})
    return build_report(read_pilot(path, columns=True), cfg, plots=False).document, None


def _inputs(wl: WorkloadConfig) -> list[tuple[str, str]]:
    """(field, path) of every file an inline workload reads by a relative path."""
    out = []
    for i, ph in enumerate(wl.phases):
        if isinstance(ph.arrival, TraceArrival | RequestLogArrival):
            out.append((f"workload.phases[{i}].arrival.path", ph.arrival.path))
    for name, g in wl.groups.items():
        if g.source is not None:
            out.append((f"workload.groups.{name}.source.path", g.source.path))
    for name, st in wl.stages.items():  # a BM25 stage's documents: a file, or the shipped set
        if isinstance(st, BM25StageModel) and st.docs != _SHIPPED_DOCS:
            out.append((f"workload.stages.{name}.docs", st.docs))
    return [(k, p) for k, p in out if not Path(p).is_absolute()]


def workload_base(cfg: PilotConfig, stored: dict[str, Any], given_dir: Path | None) -> Path:
    """Where the stored config's relative workload paths start (module docstring)."""
    if isinstance(cfg.workload, str):  # a workload file: stored absolute, its paths its own
        if not Path(cfg.workload).is_file():
            raise InputFileError(
                f"rerun: the previous run's workload file {cfg.workload} is not there",
                fix="restore it at that path: the rerun replays what it describes",
            )
        return Path(cfg.workload).parent
    inputs = _inputs(cfg.workload_config())
    recorded = stored.get("workload_dir")
    if not inputs:  # nothing read by a relative path: any folder replays the same schedule
        return (given_dir or Path(recorded or Path.cwd())).resolve()
    tries = [given_dir] if given_dir is not None else []
    if given_dir is None:
        tries = [Path(recorded)] if recorded else []
        tries += [default_pilot_path().parent, Path.cwd()]
    for d in tries:
        if all((d / p).is_file() for _, p in inputs):
            return d.resolve()
    field, rel = next((k, p) for k, p in inputs if not (tries[0] / p).is_file())
    raise InputFileError(
        f"rerun: {field}: {rel} is not at {tries[0] / rel}"
        + (f" (nor under {', '.join(str(d) for d in tries[1:])})" if len(tries) > 1 else "")
        + ": a relative path in the stored config starts at the original pilot file's folder",
        fix="give that folder with --base-dir DIR (the file must be the one the previous run "
        "read: the schedule is checked request by request)",
    )


def replayed_schedule(cfg: PilotConfig, base: Path, stored: dict[str, Any]) -> Schedule:
    """The schedule the pilot will rebuild from ``cfg`` with the stored capacity figures
    (rates, deadlines, fitted lengths), as ``Pilot.prepare`` and ``Pilot._fitted`` do."""
    wl = cfg.workload_config()
    cap = stored.get("capacity") or None
    if wl.unloaded_slo_groups():
        wl = wl.with_deadlines((cap or {}).get("deadlines_s") or {})
    fitted = (cap or {}).get("fitted_s")
    if cfg.episodes.fit_budget and fitted and wl.utilization_phases():
        wl = wl.with_durations(fitted)
    rps = cap["sustainable_rps"] if cap else None
    levels = build_schedule(wl, base_dir=cfg.workload_dir(base), capacity_rps=rps)
    return split_schedule(levels, cfg.episodes.per_level)


def check_same_schedule(schedule: Schedule, stored: dict[str, Any], path: Path) -> None:
    """Refused, naming the first differing request, where ``schedule`` is not the stored one."""
    if schedule.change_from(stored) is None:
        return
    old, new = schedule_fingerprint(stored), schedule_fingerprint(schedule.to_dict())
    said = first_difference(old or {}, new or {}) or schedule.change_from(stored)
    raise InputFileError(
        f"rerun: the schedule rebuilt from {path}'s config is not the one it replayed: {said} "
        "(first: the previous run, second: now)",
        fix="restore the files its workload read (a trace, a prompt file, a request log) or "
        "give --base-dir the original pilot file's folder; a specpilot that builds schedules "
        "differently cannot rerun it: start a new pilot instead",
    )


@dataclass(frozen=True)
class RerunPlan:
    """Everything decided before anything starts: the new config, what changed, where the
    workload's files are, and the schedule (the previous run's)."""

    previous: Previous
    cfg: PilotConfig
    settings: tuple[Setting, ...]
    change: str
    base_dir: Path
    schedule: Schedule


class Rerun:
    """``plan`` checks everything and starts nothing; ``run`` seeds the new pilot file and runs
    it (``Pilot``), resuming a rerun of the same previous run into the same ``out_dir``."""

    def __init__(
        self,
        run_dir: str | Path,
        settings: Sequence[str],
        out_dir: str | Path,
        *,
        base_dir: str | Path | None = None,
        progress: PilotProgress | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.settings = tuple(parse_setting(s) for s in settings)  # malformed: refused first
        self.out_dir = Path(out_dir)
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.progress = progress

    def plan(self) -> RerunPlan:
        prev = Previous.open(self.run_dir)
        old = stored_config(prev.record.config, str(prev.path))
        cfg = with_settings(old, self.settings, str(prev.path))
        change = change_of(old, cfg)
        stored = prev.record.schedule or {}
        base = workload_base(cfg, stored, self.base_dir)
        _check_models(cfg)
        schedule = replayed_schedule(cfg, base, stored)
        check_same_schedule(schedule, stored, prev.path)
        self._check_out(prev, cfg)
        return RerunPlan(prev, cfg, self.settings, change, base, schedule)

    def _check_out(self, prev: Previous, cfg: PilotConfig) -> None:
        """A new folder, or the same rerun's to resume; never the previous run's own."""
        f = self.out_dir / PILOT_FILE
        if f.resolve() == prev.path.resolve():
            raise PilotConfigError(
                f"rerun: --out {self.out_dir} is the previous run's folder",
                fix="give a new folder: the previous run stays as it is, to be compared with",
            )
        if not f.is_file():
            return
        with Store(f, read_only=True) as st:
            there = st.records("pilots")
        of = ((there[0].schedule or {}).get("previous_run") or {}).get("of") if there else None
        if there and (of != prev.record.pilot_id or there[0].config_sha256 != cfg.sha256()):
            raise PilotConfigError(
                f"rerun: {f} holds another pilot ({there[0].pilot_id})",
                fix="give a new --out (the same --out resumes only the same rerun)",
            )

    def run(self) -> PilotResult:
        plan = self.plan()
        f = self.out_dir / PILOT_FILE
        if not f.is_file():
            self.out_dir.mkdir(parents=True, exist_ok=True)
            with Store(f) as st:
                st.add_pilot(seed_record(plan))
        progress = self.progress or PilotProgress()
        progress.note(
            f"rerun of {plan.previous.record.pilot_id}: {f} holds its schedule, capacity figures "
            f"and deadlines, and the pilot runs it as it resumes a pilot file; changed: "
            f"{plan.change}"
        )
        pilot = Pilot(plan.cfg, self.out_dir, base_dir=plan.base_dir, progress=progress)
        return pilot.run()


def _check_models(cfg: PilotConfig) -> None:
    missing = missing_models(cfg)
    if missing:
        m = missing[0]
        raise InputFileError(
            f"rerun: arm {m.arm!r}: options.{m.field} {m.path}: {m.message} (a model path is "
            f"read relative to the folder specpilot runs in, {Path.cwd()})",
            fix="run the rerun from the folder the previous run was started in, or restore the "
            f"file; {m.fix}",
        )


def seed_record(plan: RerunPlan) -> PilotRecord:
    """The new pilot's record: the new config, the previous run's schedule (requests, design,
    capacity figures), where its workload's files are, and the previous run's summary."""
    prev = plan.previous
    stored = {k: v for k, v in (prev.record.schedule or {}).items() if k != "previous_run"}
    previous_run = {
        "of": prev.record.pilot_id,
        "pilot_file": str(prev.path.resolve()),
        "report": str(prev.report_path.resolve()) if prev.report_path else None,
        "given": given(plan.settings),
        "change": plan.change,
        "summary": summary_of(prev.report),
    }
    note = (
        f"rerun of {prev.record.pilot_id} ({prev.path}): the same schedule ({len(plan.schedule)} "
        f"requests, seed {plan.schedule.seed}), capacity figures and deadlines as that run "
        f"measured them; changed: {plan.change}"
    )
    return replace(
        prev.record,
        pilot_id=f"{plan.cfg.name}-{time.strftime('%Y%m%dT%H%M%S')}",
        name=plan.cfg.name,
        config=plan.cfg.model_dump(mode="json"),
        config_sha256=plan.cfg.sha256(),
        specpilot_version=__version__,
        created_unix=time.time(),
        finished_unix=None,
        status="running",
        hardware=hardware_facts(),
        schedule={**stored, "workload_dir": str(plan.base_dir), "previous_run": previous_run},
        notes=[n for n in prev.record.notes if not n.startswith("rerun of ")] + [note],
    )
