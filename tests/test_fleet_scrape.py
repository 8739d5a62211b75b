"""The servers' own figures during the phases (issue 50 item 1): scraped every second or two
while a phase runs, stored as 'during' snapshots with the phase they fall in, next to the
edge snapshots whose counter deltas keep their meaning; a failed scrape named and never a
zero; the concurrency each arm was started with, and what the draft costs of it.

Engines: the builtin server live on loopback (a tiny random engine), llama.cpp live through
xllamacpp, and vLLM replayed: its answers in ``tests/data/fleet_scrape`` were captured from a
real ``vllm serve`` on this CPU (README there), served back in order by a small HTTP stand-in,
since two vLLM engines take longer to start than a test may.
"""

from __future__ import annotations

import html
import http.server
import itertools
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi")

from conftest import tiny_model
from specpilot.analysis.mechanism.counters import counter_acceptance
from specpilot.analysis.service.capacity import draft_concurrency
from specpilot.analysis.service.fleet import admissible, fleet_cells
from specpilot.backends import builtin, vllm
from specpilot.backends.openai import OpenAIBackend
from specpilot.backends.scrape import scrape
from specpilot.engine.generate import Engine
from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.engine.scheduler import SchedulerConfig
from specpilot.loadgen import LoadConfig, LoadRunner
from specpilot.records import DURING, ArmRecord, PilotRecord, StrategySpec
from specpilot.report import build_report
from specpilot.report.schema import validate
from specpilot.serve import ServerConfig, create_app
from specpilot.store import PhaseRecorder, Store, read_pilot
from specpilot.workload import build_schedule
from test_server import MODEL, LiveServer, free_port  # this folder: on sys.path

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).parent / "data" / "fleet_scrape"
MANIFEST = Path(__file__).parent / "data" / "url_manifest"


@pytest.fixture(scope="module")
def server():
    config = ServerConfig(
        model_name=MODEL,
        draft_name="tiny-draft",
        default_k=2,
        scheduler=SchedulerConfig(max_queued=64),
    )
    tok = load_tokenizer(default_target_path())
    engine = Engine(tiny_model(21), tiny_model(22, n_layers=1), tokenizer=tok, max_slots=2,
                    max_seq_len=512)  # fmt: skip
    s = LiveServer(create_app(config, engine=engine))
    yield s
    s.stop()


def schedule(phases: list[tuple[str, float, float]], output: tuple[int, int] = (64, 128)) -> Any:
    """Constant arrivals per phase; long outputs by default, so that some are in flight."""
    lo, hi = output
    out = {"mean": (lo + hi) / 2, "dist": "uniform", "min": lo, "max": hi}
    return build_schedule(
        {
            "name": "fleet",
            "seed": 3,
            "groups": {"code": {"output": out}},
            "phases": [
                {"name": n, "duration_s": d, "arrival": {"kind": "constant", "rate": r}}
                for n, d, r in phases
            ],
        }
    )


def builtin_scrape(url: str):
    def scrape_now(run_id: str, arm: str, phase: str, label: str):
        return scrape(builtin.METRICS, url, run_id=run_id, arm=arm, phase=phase, label=label)

    return scrape_now


def load_run(store: Store, url: str, sched: Any, run_id: str, scraped_from: str) -> None:
    """One arm's run of ``sched`` against ``url``, its engine scraped at ``scraped_from``."""
    store.add_arm(
        ArmRecord("p", run_id, "spec", "speculative", "builtin", {"endpoint": scraped_from})
    )
    cfg = LoadConfig.build(
        url, model=MODEL, run_id=run_id, arm="spec", timeout_s=60, progress=False,
        phase_timing="back_to_back",
    )  # fmt: skip
    runner = LoadRunner.for_schedule(sched, cfg, store.sink)
    durations = {p.name: p.duration_s for p in sched.phases}
    rec = PhaseRecorder(
        store, run_id, "spec", builtin_scrape(scraped_from), durations, interval_s=1.0
    ).attach(runner)
    try:
        result = runner.run()
    finally:
        rec.stop()
    assert {r.status for r in result.records} == {"ok"}, [r.error for r in result.records]


def test_builtin_phases_yield_a_during_series_and_the_edges_keep_their_deltas(server, tmp_path):
    sched = schedule([("steady", 4.0, 2.0), ("peak", 4.0, 6.0)])
    path = tmp_path / "pilot.duckdb"
    with Store(path) as store:
        store.add_pilot(PilotRecord("p", "fleet", {}, "", "0", 0.0, schedule=sched.to_dict()))
        load_run(store, server.url, sched, "r1", server.url)
    data = read_pilot(path)
    phases = {p.phase: p for p in data.phases if not p.warmup}
    assert set(phases) == {"steady", "peak"}
    for name, p in phases.items():
        mine = sorted(
            (s for s in data.snapshots if s.phase == name and s.label == DURING), key=lambda s: s.t
        )
        # one every second inside the phase, the first a second after its start
        seconds = p.actual_end_t - p.actual_start_t
        assert len(mine) >= max(2, int(seconds) - 1), (name, seconds, len(mine))
        assert all(p.actual_start_t + 0.8 < s.t <= p.actual_end_t for s in mine)
        gaps = [b.t - a.t for a, b in itertools.pairwise(mine)]
        assert all(0.8 <= g <= 1.6 for g in gaps), gaps
        for s in mine:  # the normalised figures only, no exposition text
            assert s.raw == "" and not s.failed and s.engine == "builtin"
            assert {"kv_cache_usage", "requests_running", "requests_waiting"} <= set(s.metrics)
            assert s.metrics["slots_total"] == 2.0 and s.rss_bytes  # memory inside the phase
        edges = [s.label for s in data.snapshots if s.phase == name and s.label != DURING]
        assert sorted(edges) == ["after", "before"]
    busy = [s.metrics["slots_busy"] for s in data.snapshots if s.label == DURING]
    assert max(busy) > 0, busy
    # counter deltas: over the edges only, the same with or without the series beside them
    edges_only = [s for s in data.snapshots if s.label != DURING]
    got, want = counter_acceptance(data.snapshots), counter_acceptance(edges_only)
    assert got == want and got["spec"].drafts > 0
    before = {s.phase: s for s in data.snapshots if s.label == "before"}
    after = {s.phase: s for s in data.snapshots if s.label == "after"}
    delta = sum(  # a labelled counter appears at its first draft: absent before is none yet
        after[p].metrics["spec_rounds"] - before[p].metrics.get("spec_rounds", 0.0) for p in phases
    )
    assert got["spec"].drafts == delta
    cells = {c.phase: c for c in fleet_cells(data.snapshots, data.phases, data.arms)}
    steady = [s for s in data.snapshots if s.phase == "steady" and s.label == DURING]
    assert cells["steady"].samples == len(steady) and cells["steady"].failed == ()
    assert cells["steady"].running_peak == max(s.metrics["requests_running"] for s in steady)
    assert cells["steady"].preemptions is None and "preemptions" in cells["steady"].not_published
    (adm,) = admissible(data.snapshots, data.arms)
    assert (adm.sequences, adm.sized_by) == (2.0, "slots")


def test_a_replica_whose_scrape_fails_is_named_and_its_figures_are_absent(server, tmp_path):
    sched = schedule([("steady", 3.0, 2.0)])
    dead = f"http://127.0.0.1:{free_port()}"  # nobody listens: its /metrics never answers
    path = tmp_path / "pilot.duckdb"
    with Store(path) as store:
        store.add_pilot(PilotRecord("p", "fleet", {}, "", "0", 0.0, schedule=sched.to_dict()))
        load_run(store, server.url, sched, "r1", server.url)
        load_run(store, server.url, sched, "r2", dead)
    data = read_pilot(path)
    failed = [s for s in data.snapshots if s.run_id == "r2" and s.label == DURING]
    assert len(failed) >= 1 and all(s.failed and s.metrics == {} for s in failed)
    assert all(s.phase == "steady" and dead in s.raw for s in failed)
    (cell,) = fleet_cells(data.snapshots, data.phases, data.arms)
    live = [s for s in data.snapshots if s.run_id == "r1" and s.label == DURING]
    assert cell.samples == len(live) and cell.replicas == 1  # r2 adds nothing, not zeros
    assert cell.waiting_peak == max(s.metrics["requests_waiting"] for s in live)
    assert cell.kv_use_peak == max(s.metrics["kv_cache_usage"] for s in live)
    (line,) = cell.failed
    n = sum(1 for s in data.snapshots if s.run_id == "r2")
    assert line.startswith(f"run r2 at {dead}: {n} of {n} scrapes failed")
    assert {x.run_id for x in cell.series} == {"r1"}


class Replay(http.server.ThreadingHTTPServer):
    """Serves one captured vLLM's answers: ``/v1/models``, and ``/metrics`` as of ``stage``:
    idle, then each load capture in turn, then after."""

    def __init__(self, arm: str) -> None:
        self.arm = arm
        self.stage = "idle"
        self.tick = 0
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, path: str) -> str | None:
        if path == "/v1/models":
            return (DATA / f"{self.arm}_models.json").read_text()
        if path != "/metrics":
            return None
        if self.stage == "load":
            self.tick += 1
            return (DATA / f"{self.arm}_metrics_load_{(self.tick - 1) % 3 + 1}.txt").read_text()
        return (DATA / f"{self.arm}_metrics_{self.stage}.txt").read_text()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.answer(self.path)  # type: ignore[attr-defined]
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write((body or "").encode())

    def log_message(self, *args: Any) -> None:
        pass


def replay_phase(store: Store, arm: str, interval_s: float = 0.5) -> None:
    """One phase of a vLLM arm by URL: the edges and the series through the URL arm's own
    scrape (``OpenAIBackend(engine="vllm")``), the load runner reduced to its edges."""
    srv = Replay(arm)
    backend = OpenAIBackend(srv.url + "/v1", model="smol", engine="vllm")
    plain = "plain" in arm
    store.add_arm(ArmRecord("p", f"run-{arm}", arm, "baseline" if plain else "speculative", "vllm",
                            {"endpoint": backend.endpoint},
                            strategy=StrategySpec() if plain else StrategySpec("draft", k=3)))  # fmt: skip
    runner = SimpleNamespace(
        phase_starts={"peak": 0.0}, phase_names=["peak"], phase_sizes={"peak": 8},
        schedule=[SimpleNamespace(phase="peak", warmup=False)],
        on_phase=None, cut_phases=set(),
    )  # fmt: skip
    rec = PhaseRecorder(
        store, f"run-{arm}", arm, backend.scrape, {"peak": 3.0}, interval_s=interval_s
    ).attach(runner)
    rec.on_phase("peak", "start", time.perf_counter())
    srv.stage = "load"
    time.sleep(4 * interval_s + 0.2)
    srv.stage = "after"
    rec.on_phase("peak", "end", time.perf_counter())
    rec.stop()
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def vllm_pilot(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm") / "pilot.duckdb"
    with Store(path) as store:
        store.add_pilot(PilotRecord("p", "vllm", {}, "", "0", 0.0))
        replay_phase(store, "vllm_plain")
        replay_phase(store, "vllm_draft")
    return read_pilot(path)


def test_vllm_series_and_the_draft_s_concurrency_cost_from_both_arms_started_kv(vllm_pilot):
    data = vllm_pilot
    during = [s for s in data.snapshots if s.label == DURING]
    assert {s.arm for s in during} == {"vllm_plain", "vllm_draft"}
    assert all(s.engine == "vllm" and s.raw == "" and s.phase == "peak" for s in during)
    edge = next(s for s in data.snapshots if s.label == "before")
    assert "/v1/models" in json.loads(edge.raw)  # an edge keeps what it read, the context too
    assert edge.metrics["context_tokens"] == 1024.0
    cells = {c.arm: c for c in fleet_cells(data.snapshots, data.phases, data.arms)}
    plain = cells["vllm_plain"]
    assert plain.samples >= 3 and plain.waiting_peak == 4.0 and plain.running_peak == 4.0
    assert plain.kv_use_peak == pytest.approx(4 / 181)  # 4 requests' blocks of 182 (one null)
    assert plain.preemptions == 0.0 and plain.not_published == ()
    assert cells["vllm_draft"].kv_use_peak == pytest.approx(4 / 159)
    adm = {a.arm: a for a in admissible(data.snapshots, data.arms)}
    assert (adm["vllm_plain"].sequences, adm["vllm_plain"].sized_by) == (22.75, "kv_cache")
    assert adm["vllm_draft"].sequences == 20.0 and adm["vllm_draft"].context_tokens == 1024.0
    (cost,) = draft_concurrency(list(adm.values()), [], [("vllm_plain", "vllm_draft")])
    assert (cost.used, cost.sequences) == ("measured", 2.75)


def test_the_report_shows_the_series_and_says_the_draft_s_cost_was_measured(vllm_pilot):
    rep = build_report(vllm_pilot, plots=False)
    assert validate(rep.document) == []
    fleet = rep.document["capacity"]["fleet"]
    assert [c["arm"] for c in fleet["cells"]] == ["vllm_draft", "vllm_plain"]
    assert fleet["cells"][1]["series"][0]["waiting"][0] == 4.0  # the series itself, per replica
    (cost,) = fleet["draft_concurrency"]
    assert cost["used"] == "measured" and cost["inferred"] is None
    said = "measured: vllm_draft admits 20 sequences against vllm_plain's 22.75"
    for text, as_text in ((rep.markdown, str), (rep.html, html.escape)):
        assert as_text("The servers' own figures during the phases") in text
        assert as_text(said) in text and "22.75 sequences of 1,024 tokens (KV cache)" in text
    row = next(x for x in rep.markdown.splitlines() if x.startswith("| peak | vllm_plain |"))
    assert "| 2.2% / 2.2% | 4 / 4 |" in row


def test_admissible_concurrency_from_cache_config_info():
    """vLLM's own figure where its ``cache_config_info`` has it, else KV blocks x block size /
    max_model_len (an older release's labels: the same answer from the same capture)."""
    text = (MANIFEST / "vllm_metrics_ngram_k3.txt").read_text()
    models = (MANIFEST / "vllm_models.json").read_text()
    own = vllm.parse_metrics({"/metrics": text}).metrics
    assert own["kv_admissible_sequences"] == 22.75 and own["kv_capacity_tokens"] == 182 * 128
    older = text.replace('kv_cache_max_concurrency="22.75",', "")
    assert "kv_admissible_sequences" not in vllm.parse_metrics({"/metrics": older}).metrics
    m = vllm.parse_metrics({"/metrics": older, "/v1/models": models}).metrics
    assert m["kv_admissible_sequences"] == 182 * 128 / 1024 and m["context_tokens"] == 1024.0
    none_yet = text.replace('kv_cache_max_concurrency="22.75"', 'kv_cache_max_concurrency="None"')
    assert "kv_admissible_sequences" not in vllm.parse_metrics({"/metrics": none_yet}).metrics


def test_llamacpp_slots_series(tmp_path):
    """llama.cpp live (xllamacpp, SmolLM2): its slots inside the phase from ``/slots``, its queue
    from ``/metrics``; no KV use or preemption counter in this build: not published, not 0."""
    pytest.importorskip("xllamacpp")
    from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig

    sched = schedule([("steady", 4.0, 2.0)], output=(16, 32))
    path = tmp_path / "pilot.duckdb"
    cfg = LlamaCppConfig(model=default_target_path(), threads=1, n_parallel=2, n_ctx=1024)
    with LlamaCppBackend(cfg) as be, Store(path) as store:
        store.add_pilot(PilotRecord("p", "fleet", {}, "", "0", 0.0, schedule=sched.to_dict()))
        store.add_arm(ArmRecord("p", "r1", "lc", "baseline", "llamacpp", {"endpoint": be.endpoint}))
        load = LoadConfig.build(be.endpoint, run_id="r1", arm="lc", progress=False, timeout_s=60)
        runner = LoadRunner.for_schedule(sched, load, store.sink)
        rec = PhaseRecorder(store, "r1", "lc", be.scrape, {"steady": 4.0}, interval_s=1.0)
        rec.attach(runner)
        try:
            result = runner.run()
        finally:
            rec.stop()
    assert {r.status for r in result.records} == {"ok"}, [r.error for r in result.records]
    data = read_pilot(path)
    during = [s for s in data.snapshots if s.label == DURING]
    assert len(during) >= 3 and {s.phase for s in during} == {"steady"}
    for s in during:
        assert s.engine == "llamacpp" and s.raw == "" and s.rss_bytes  # the process tree's
        assert s.metrics["slots_total"] == 2.0 and s.metrics["context_tokens"] == 512.0
        assert 0 <= s.metrics["slots_busy"] <= 2 and "requests_waiting" in s.metrics
        assert "kv_cache_usage" not in s.metrics and "preemptions" not in s.metrics
    (cell,) = fleet_cells(data.snapshots, data.phases, data.arms)
    assert cell.slots_busy_peak == max(s.metrics["slots_busy"] for s in during) > 0
    assert cell.kv_use_peak is None and cell.preemptions is None
    assert set(cell.not_published) == {"kv_cache_usage", "preemptions"}
    (adm,) = admissible(data.snapshots, data.arms)
    assert (adm.sequences, adm.sized_by, adm.context_tokens) == (2.0, "slots", 512.0)


def test_sglang_kv_pool_from_its_documented_server_info():
    """SGLang cannot run here: its ``/get_server_info`` as its docs print it (url_manifest)
    gives the KV pool in tokens; the admissible sequences need the context from ``/v1/models``
    (written here in the shape of SGLang's ``ModelCard``, protocol.py: no captured answer) and
    are absent without it, never guessed."""
    from specpilot.backends import sglang

    info = (MANIFEST / "sglang_server_info.json").read_text()
    alone = sglang.parse_metrics({"/get_server_info": info}).metrics
    assert alone["kv_capacity_tokens"] == 20480.0 and "kv_admissible_sequences" not in alone
    models = json.dumps({"data": [{"id": "qwen", "max_model_len": 4096}]})
    m = sglang.parse_metrics({"/get_server_info": info, "/v1/models": models}).metrics
    assert m["kv_admissible_sequences"] == 5.0 and m["context_tokens"] == 4096.0
