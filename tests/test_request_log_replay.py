"""Request-log replay in the workload (issue 50 item 2, the integration): a ``request_log``
phase built into a schedule and checked against the log written here (plain JSONL, OpenAI Batch
lines, vLLM's log); routes, a named window, time scale and rate cap; the config's errors; the
requests sent over loopback to the load generator's test server, each on the route it was
logged on (``specpilot load`` into a pilot file); and no prompt text of the log in the phase's
description, the terminal or the report.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import typing
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from specpilot.cli import main
from specpilot.errors import InputFileError
from specpilot.loadgen import LoadConfig, request_body, run_schedule
from specpilot.loadgen.config import request_path
from specpilot.loadgen.testserver import TestServer, TestServerConfig
from specpilot.workload import Schedule, WorkloadError, build_schedule, load_workload
from specpilot.workload.logconfig import RequestLogArrival
from specpilot.workload.logshapes import SHAPES
from specpilot.workload.requestlog import arrivals_trace, is_request_log, request_log_trace
from specpilot.workload.trace import find_windows
from test_request_log import _batch_log, _vllm_log  # the reader's tests' real-format writers

pytestmark = pytest.mark.timeout(120)

SECRET = "zebra-quartz"  # in every logged prompt: it must stay in the requests
T0 = 1_740_830_400.0  # 2025-03-01 12:00:00 UTC
GROUPS = {
    "code": {"output": {"mean": 48}, "sampling": {"temperature": 0.0}},
    "longform": {
        "output": {"mean": 100, "dist": "uniform", "min": 50, "max": 150},
        "sampling": {"temperature": 0.8, "top_p": 0.9, "stop": ["END"]},
    },
    "structured": {},
}
ROUTES = {"search": "longform", "coding": "code", "default": "structured"}


def _offsets(n: int) -> np.ndarray:
    """Seconds from the first request: exponential gaps, 40 quick ones from request 150."""
    gaps = np.random.default_rng(11).exponential(0.2, n)
    gaps[0] = 0.0
    gaps[151:190] = 0.005
    return np.round(np.cumsum(gaps), 3)


def _body(i: int) -> dict:
    """Every 4th a completions body with its own length, sampling, seed and stop; the chat
    bodies have some of them, some tools (not replayed) and a stream flag (not hashed)."""
    if i % 4 == 0:
        return {"model": "prod-8b", "prompt": f"{SECRET} {i}: def f{i}(x):", "max_tokens": 20 + i % 5,
                "temperature": 0.6, "seed": 1000 + i, "stop": "\n\n"}  # fmt: skip
    body: dict = {
        "model": "prod-8b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"{SECRET} {i}: what is {i} + {i}?"},
        ],
    }
    if i % 3 == 0:
        body["max_tokens"] = 8 + i % 11
    if i % 5 == 0:
        body["tools"] = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    if i % 7 == 0:
        body["stream"] = True
    return body


def _plain_log(dirpath: Path, n: int = 300) -> tuple[Path, list[dict], np.ndarray]:
    off = _offsets(n)
    rows = [
        {"timestamp": T0 + float(off[i]), "team": ["search", "coding", "other"][i % 3],
         "group": ["code", "structured"][i % 2], "body": _body(i)}
        for i in range(n)
    ]  # fmt: skip
    dirpath.mkdir(parents=True, exist_ok=True)
    path = dirpath / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows, off


def _sent(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def _sha(body: dict) -> str:
    blob = json.dumps(_sent(body), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _yaml(tmp_path: Path, phases: list[dict], **top) -> Path:
    data = {"seed": 4, "groups": GROUPS, **top, "phases": phases}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _log_phase(**arrival) -> dict:
    return {"name": "replay", "arrival": {"kind": "request_log", "path": "logs/plain.jsonl",
                                          **arrival}}  # fmt: skip


# -- the schedule ------------------------------------------------------------------------------


def test_a_plain_log_replays_its_times_groups_bodies_and_sampling(tmp_path):
    _, rows, off = _plain_log(tmp_path / "logs")
    stages = {"tool": {"kind": "simulated", "dist": "fixed", "median_s": 0.3}}  # every group
    path = _yaml(
        tmp_path,
        [{"name": "synthetic", "duration_s": 5, "arrival": {"kind": "constant", "rate": 1}},
         _log_phase(route_field="team", routes=ROUTES)],
        warmup={"requests": 2, "rate": 2.0}, stages=stages,
    )  # fmt: skip
    sched = build_schedule(path)
    reqs = sched.phase("replay")
    assert len(reqs) == 300 and [r.index for r in reqs] == list(range(7, 307))
    assert np.allclose([r.send_t for r in reqs], off, atol=1e-6)
    groups = sched.groups
    for r, row in zip(reqs, rows, strict=True):
        body, g = row["body"], ROUTES.get(row["team"], ROUTES["default"])
        assert r.group == g and r.api == ("completions" if "prompt" in body else "chat")
        assert r.body_sha256 == _sha(body) and r.prompt_id == f"log-{_sha(body)[:16]}"
        if r.api == "chat":
            assert r.messages == body["messages"] and r.prompt is None
        else:
            assert r.messages == [] and r.prompt == body["prompt"]
        # the body's own values where it has them, the group's otherwise
        if "max_tokens" in body:
            assert r.max_tokens == body["max_tokens"]
        elif g == "code":
            assert r.max_tokens == 48
        elif g == "longform":
            assert 50 <= r.max_tokens <= 150
        want_t = body.get("temperature", groups[g]["sampling"]["temperature"])
        assert r.temperature == want_t and r.top_p == groups[g]["sampling"]["top_p"]
        assert r.stop == ([body["stop"]] if "stop" in body else groups[g]["sampling"]["stop"])
        if "seed" in body:
            assert r.seed == body["seed"]
        else:  # sampled: a seed drawn for every arm alike; greedy: none
            assert (r.seed is not None) == (want_t > 0)
        assert r.deadline_s == groups[g]["slo"]["deadline_s"] and not r.ignore_eos
        assert r.client_stages == {} and not r.warmup  # the log's time is after its stages
    # the other phases as before: group prompts, client stages, no logged fields in the JSON
    synthetic = sched.to_dict()["requests"][:7]
    assert all(not q["prompt_id"].startswith("log-") and "api" not in q for q in synthetic)
    assert all(q["client_stages"] == {"tool": 0.3} for q in synthetic)
    info = sched.phases[-1]
    assert info.duration_s == pytest.approx(off[-1]) and info.requests == 300
    assert info.arrival["kind"] == "request_log" and info.arrival["shape"] == "jsonl"
    assert info.arrival["by_api"] == {"chat": 225, "completions": 75}
    assert info.arrival["not_replayed"] == {"tools": sum(1 for r in rows if "tools" in r["body"])}
    # deterministic, and through JSON (a schedule file, a pilot file) unchanged
    again = build_schedule(path)
    assert again.to_json() == sched.to_json()
    back = Schedule.from_json(sched.to_json())
    assert back.sha256() == sched.sha256() and back.phase("replay") == reqs


def test_openai_batch_lines_replay_scaled_with_model_routes(tmp_path):
    (tmp_path / "logs").mkdir()
    _, rows = _batch_log(tmp_path / "logs")
    routes = {"llama-8b": "longform", "qwen-coder": "code"}
    arrival = {"kind": "request_log", "path": "logs/batch.jsonl", "route_field": "body.model",
               "routes": routes, "time_scale": 2.0}  # fmt: skip
    sched = build_schedule(_yaml(tmp_path, [{"name": "batch", "arrival": arrival}]))
    kept = [r for r in rows if r["url"] != "/v1/embeddings"]
    t = np.array([dt.datetime.fromisoformat(r["timestamp"]).timestamp() for r in kept])
    assert len(sched.requests) == len(kept) == 294
    assert np.allclose([r.send_t for r in sched.requests], 2.0 * (t - t[0]), atol=1e-5)
    for r, row in zip(sched.requests, kept, strict=True):
        assert r.group == routes[row["body"]["model"]] and r.body_sha256 == _sha(row["body"])
        assert r.api == ("chat" if row["url"] == "/v1/chat/completions" else "completions")
        assert r.max_tokens == row["body"]["max_tokens"]
        assert (r.messages if r.api == "chat" else r.prompt) == (
            row["body"]["messages"] if r.api == "chat" else row["body"]["prompt"]
        )
    assert sched.phases[0].arrival["skipped"] == {"url /v1/embeddings": 6}
    assert sched.phases[0].duration_s == pytest.approx(2.0 * (t[-1] - t[0]), abs=1e-5)


def test_a_vllm_log_replays_as_completions_with_its_lora_route(tmp_path):
    path, reqs = _vllm_log(tmp_path, "new", n=60)
    arrival = {"kind": "request_log", "path": path.name, "route_field": "lora_name",
               "routes": {"sql-lora": "structured", "default": "code"}}  # fmt: skip
    sched = build_schedule(_yaml(tmp_path, [{"name": "vllm", "arrival": arrival}]))
    assert [r.prompt for r in sched.requests] == [q["prompt"] for q in reqs]
    assert {r.api for r in sched.requests} == {"completions"}
    assert [r.group for r in sched.requests] == [
        "structured" if q["i"] % 9 == 0 else "code" for q in reqs
    ]
    assert [r.max_tokens for r in sched.requests] == [64 + q["i"] for q in reqs]
    # whole seconds: spread over their second, so the per-second counts hold
    sec = np.array([q["second"] for q in reqs])
    got = np.floor(np.array([r.send_t for r in sched.requests]) + 1e-9) + sec[0]
    assert np.array_equal(got, sec) and sched.phases[0].arrival["time_resolution_s"] == 1.0


def test_time_scale_and_rate_cap_bring_the_log_onto_a_smaller_fleet(tmp_path):
    _plain_log(tmp_path / "logs")
    off = _offsets(300) * 0.5
    cap = 300 / off[-1] / 3  # a third of the replayed rate
    sched = build_schedule(_yaml(tmp_path, [_log_phase(time_scale=0.5, rate_cap=float(cap))]))
    t = np.array([r.send_t for r in sched.requests])
    # every third request of the log, at its own (scaled) time: thinned, nothing moved
    assert np.allclose(t, off[2::3], atol=1e-6) and t.size / off[-1] <= cap
    info = sched.phases[0]
    assert info.duration_s == pytest.approx(off[-1]) and info.arrival["keep_fraction"] == (
        pytest.approx(1 / 3, abs=1e-6)
    )
    assert info.arrival["requests_in_window"] == 300 and info.arrival["requests"] == t.size


def test_a_named_window_is_the_one_trace_windows_finds_and_duration_cuts(tmp_path):
    log, _, off = _plain_log(tmp_path / "logs")
    windows = {"window_s": 20, "burst_s": 1.0, "context_s": 10}
    burst = find_windows(request_log_trace(log), **windows)["burst"]
    assert burst.start_s <= off[151] < burst.end_s  # the burst written into the log
    phases = [
        _log_phase(window="burst", **windows),
        {**_log_phase(), "name": "cut", "duration_s": 5},
    ]
    sched = build_schedule(_yaml(tmp_path, phases))
    inside = off[(off >= burst.start_s) & (off < burst.end_s)]
    got = [r.send_t for r in sched.phase("replay")]
    assert np.allclose(got, inside - burst.start_s, atol=1e-6) and len(got) >= 40
    info = sched.phases[0]
    assert info.window == burst.to_dict() and info.arrival["window"] == [burst.start_s, burst.end_s]
    assert info.duration_s == pytest.approx(burst.end_s - burst.start_s)
    cut = sched.phase("cut")
    assert len(cut) == int((off < 5).sum()) and sched.phases[1].duration_s == 5.0
    assert sched.phases[1].arrival["requests"] == len(cut)


def test_groups_from_the_log_or_drawn_by_the_weights(tmp_path):
    _, rows, _ = _plain_log(tmp_path / "logs", n=40)
    sched = build_schedule(_yaml(tmp_path, [_log_phase(group_field="group")]))
    assert [r.group for r in sched.requests] == [row["group"] for row in rows]
    weighted = build_schedule(_yaml(tmp_path, [{**_log_phase(), "groups": {"longform": 1}}]))
    assert {r.group for r in weighted.requests} == {"longform"}
    with pytest.raises(WorkloadError) as err:  # the log's teams are no groups of the workload
        build_schedule(_yaml(tmp_path, [_log_phase(group_field="team")]))
    assert "phases.replay.arrival.group_field" in str(err.value)
    assert "coding, other, search in team, which are not under groups" in str(err.value)
    assert "route_field and routes" in err.value.fix


# -- the config's errors --------------------------------------------------------------------------


def test_a_route_to_a_group_not_under_groups_names_the_field_line_and_fix(tmp_path):
    _plain_log(tmp_path / "logs", n=5)
    path = _yaml(tmp_path, [_log_phase(route_field="team", routes={**ROUTES, "coding": "sql"})])
    line = next(n for n, t in enumerate(path.read_text().splitlines(), 1) if "coding: sql" in t)
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    msg = str(err.value)
    assert f"w.yaml:{line}: phases[0].arrival.routes.coding: routes sends 'coding' to group " in msg
    assert "'sql', which is not under groups -> add 'sql' under groups" in msg
    assert "or route 'coding' to one of code, longform, structured" in msg


@pytest.mark.parametrize(
    ("arrival", "where"),
    [
        ({"route_field": "team"}, "phases[0].arrival.routes: routes missing: route_field and routes go together"),
        ({"routes": {"a": "code"}}, "phases[0].arrival.route_field: route_field missing"),
        ({"group_field": "g", "route_field": "t", "routes": {"a": "code"}},
         "phases[0].arrival.group_field: group_field and route_field/routes both given"),
        ({"window": [9, 3]}, "phases[0].arrival.window: window [9.0, 3.0]: need 0 <= start < end"),
        ({"rate_cap": 0}, "phases[0].arrival.rate_cap: Input should be greater than 0"),
        ({"time_scale": -1}, "phases[0].arrival.time_scale: Input should be greater than 0"),
        ({"path": "logs/none.jsonl"}, "phases[0].arrival.path: request log not found: "),
    ],
)  # fmt: skip
def test_a_bad_request_log_arrival_is_refused_when_the_file_is_read(tmp_path, arrival, where):
    _plain_log(tmp_path / "logs", n=5)
    with pytest.raises(WorkloadError, match="w.yaml:[0-9]+: " + where.replace("[", "\\[")):
        load_workload(_yaml(tmp_path, [_log_phase(**arrival)]))


def test_the_example_workload_replays_its_own_log():
    example = Path(__file__).resolve().parents[1] / "examples" / "workload-request-log.yaml"
    sched = build_schedule(example)
    lines = (example.parent / "request-log.jsonl").read_text("utf-8").splitlines()
    assert len(sched.phase("whole_log")) == len(lines) == 40
    assert {r.api for r in sched.requests} == {"chat", "completions"}
    assert sched.phases[1].window["kind"] == "peak" and 0 < len(sched.phase("peak")) <= 10
    assert sched.to_json() == build_schedule(example).to_json()


def test_the_shapes_named_in_the_config_and_the_cli_are_the_readers():
    shape = typing.get_type_hints(RequestLogArrival)["shape"]
    assert typing.get_args(shape) == ("auto", *SHAPES)
    from specpilot.commands import trace_windows

    assert trace_windows.SHAPES == SHAPES


# -- replay over loopback -------------------------------------------------------------------------


def _small(tmp_path: Path) -> tuple[Path, list[dict]]:
    _, rows, _ = _plain_log(tmp_path / "logs", n=12)
    return _yaml(tmp_path, [_log_phase(route_field="team", routes=ROUTES, time_scale=0.1)]), rows


def test_chat_and_completions_entries_go_to_their_own_routes(tmp_path):
    wl, rows = _small(tmp_path)
    sched = build_schedule(wl)
    events: dict[str, set[str]] = {}

    def on_event(rid, t, obj):
        events.setdefault(rid, set()).add(obj.get("object"))

    with TestServer(TestServerConfig(record=True, output_tokens=3)) as srv:
        cfg = LoadConfig.build(srv.url, api="chat", progress=False, on_event=on_event)
        result = run_schedule(sched.requests, cfg)
        received = [b for _, b in sorted(srv.stats.received, key=lambda x: x[0])]
    assert [r.status for r in result.records] == ["ok"] * 12
    for r, row in zip(result.records, rows, strict=True):
        chat = "messages" in row["body"]
        assert events[r.request_id] == {"chat.completion.chunk" if chat else "text_completion"}
    assert any("3 request(s) of a request log sent to /v1/completions" in n
               for n in result.summary.notes)  # fmt: skip
    for got, row in zip(received, rows, strict=True):
        body = row["body"]
        assert got["model"] == cfg.endpoint.model != body["model"] and got["stream"] is True
        assert "tools" not in got
        if "messages" in body:
            assert got["messages"] == body["messages"] and "prompt" not in got
        else:
            assert got["prompt"] == body["prompt"] and "messages" not in got
            assert got["stop"] == [body["stop"]] and got["seed"] == body["seed"]
    # a run whose api is completions sends the chat entries to the chat route all the same
    comp = LoadConfig.build("http://x", api="completions")
    chat_req = next(r for r in sched.requests if r.api == "chat")
    assert request_path(comp, chat_req) == "/v1/chat/completions"
    assert json.loads(request_body(comp, chat_req))["messages"] == chat_req.messages


def test_load_keeps_the_prompts_in_the_pilot_file_and_out_of_the_terminal_and_report(
    tmp_path, capsys
):
    from specpilot.store import read_pilot

    wl, rows = _small(tmp_path)
    out = tmp_path / "run.duckdb"
    with TestServer(TestServerConfig(output_tokens=3)) as srv:
        assert main(["load", srv.url, "--workload", str(wl), "--out", str(out)]) == 0
    assert main(["schedule", str(wl)]) == 0
    assert main(["report", str(out), "--no-plots", "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr()
    data = read_pilot(out)
    assert [r.status for r in data.requests] == ["ok"] * 12
    stored = data.pilot.schedule["requests"]  # the prompts stay in the pilot file
    assert [q.get("prompt") or q["messages"] for q in stored] == [
        r["body"].get("prompt") or r["body"]["messages"] for r in rows
    ]
    assert "request log plain.jsonl (jsonl): 12 requests replayed (12 in the log)" in printed.out
    report = tmp_path / "report"
    files = {
        str(p.relative_to(report)): p.read_text("utf-8") for p in report.rglob("*") if p.is_file()
    }
    assert {"report.html", "report.md", "report.json"} <= set(files)
    phases = json.dumps([asdict(p) for p in build_schedule(wl).phases])
    for where, text in (
        *files.items(),
        ("terminal", printed.out + printed.err),
        ("phases", phases),
    ):
        assert SECRET not in text, where
        assert "Be brief" not in text, where


# -- trace-windows reads request logs ---------------------------------------------------------------


def test_trace_windows_tells_a_request_log_from_an_arrival_trace(tmp_path, capsys):
    log, _, _ = _plain_log(tmp_path)
    batch, _ = _batch_log(tmp_path)
    vllm, _ = _vllm_log(tmp_path, "old", n=5)
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n")
    (tmp_path / "t.jsonl").write_text('{"timestamp": 1, "input_tokens": 2, "output_tokens": 3}\n')
    (tmp_path / "t.json").write_text('[{"timestamp": 1, "input_tokens": 2, "output_tokens": 3}]\n')
    assert [is_request_log(p) for p in (log, batch, vllm)] == [True] * 3
    assert not any(is_request_log(tmp_path / n) for n in ("t.csv", "t.jsonl", "t.json", "no"))
    argv = ["trace-windows", str(log), "--window-s", "20", "--burst-s", "1", "--context-s", "10"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "plain.jsonl: 300 requests over" in text and "from 2025-03-01 12:00:00.000" in text
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["windows"]
    want = find_windows(request_log_trace(log), window_s=20, burst_s=1.0, context_s=10)
    assert got == {k: w.to_dict() for k, w in want.items()} and set(got) == {
        "off_peak",
        "peak",
        "burst",
    }
    assert got["burst"]["start_time"].startswith("2025-03-01 12:")
    assert arrivals_trace(tmp_path / "t.jsonl").n == 1  # a JSONL trace, read as one
    (tmp_path / "bad.jsonl").write_text('{"when": 1}\n')
    with pytest.raises(InputFileError, match="no timestamp column"):
        arrivals_trace(tmp_path / "bad.jsonl")  # neither: the trace reader says what it misses
