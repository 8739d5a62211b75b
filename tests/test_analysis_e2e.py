"""R4: stages, decode share, Amdahl (MISSION's example), trace import and ``specpilot stages``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specpilot.analysis.base.requests import RequestTable
from specpilot.analysis.service.e2e import StageTable, amdahl, recommend, stage_breakdown
from specpilot.analysis.service.traces import StageMap, TraceError, parse_csv, parse_otlp
from specpilot.cli import main
from specpilot.records import RequestRecord


def test_missions_amdahl_example() -> None:
    a = amdahl(10.0, 3.0, 2.0)  # 7 s fixed + 3 s decode, decode halved
    assert a.after_s == 8.5
    assert round(a.overall_speedup, 2) == 1.18
    assert amdahl(10.0, 10.0, 2.0).overall_speedup == 2.0  # all decode: the local speed-up
    with pytest.raises(ValueError, match="within the task"):
        amdahl(1.0, 3.0, 2.0)


def test_stages_from_requests_use_server_timings_else_the_client_view() -> None:
    reqs = [
        RequestRecord(
            "r",
            "a",
            "p",
            "rag",
            "p-0",
            0.0,
            "ok",
            sent_t=0.0,
            first_content_t=1.0,
            done_t=4.0,
            output_tokens=100,
            queue_s=0.2,
            prefill_s=0.6,
            decode_s=3.0,
            client_stages={"retrieval": 6.0},
        ),
        RequestRecord(
            "r",
            "a",
            "p",
            "chat",
            "p-1",
            0.0,
            "ok",
            sent_t=0.0,
            first_content_t=0.5,
            done_t=2.5,
            output_tokens=300,
        ),
        RequestRecord("r", "a", "p", "chat", "p-2", 0.0, "timeout", sent_t=0.0),
    ]
    st = StageTable.from_requests(RequestTable.build(reqs), "a")
    assert st.source == "mixed"
    rows = {r.task_group: r for r in stage_breakdown(st, 2.0)}
    rag = rows["rag"]
    assert rag.mean_stage_s == pytest.approx(
        {"retrieval": 6.0, "queue": 0.2, "prefill": 0.6, "decode": 3.0, "other": 0.2}
    )
    assert rag.decode_share == pytest.approx(3.0 / 10.0)
    assert rag.dominant_other_stage == "retrieval"
    assert rag.projection is not None and rag.projection.overall_speedup == pytest.approx(10 / 8.5)
    chat = rows["chat"]  # client view: first-token wait 0.5 s as prefill, 2.0 s decode
    assert chat.tasks == 1 and chat.decode_share == pytest.approx(2.0 / 2.5)
    recs = {r.task_group: r for r in recommend(list(rows.values()), 0.35)}
    assert recs["rag"].action == "fix_first" and recs["rag"].bottleneck == "retrieval"
    assert "decode is 30% of task time, retrieval 60%" in recs["rag"].reason
    assert recs["chat"].action == "pilot"


def span(sid, name, start_ms, end_ms, parent="", attrs=None, events=None):
    return {
        "traceId": "t1",
        "spanId": sid,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(int(start_ms * 1e6)),
        "endTimeUnixNano": str(int(end_ms * 1e6)),
        "attributes": [{"key": k, "value": v} for k, v in (attrs or {}).items()],
        "events": [{"name": n, "timeUnixNano": str(int(t * 1e6))} for n, t in (events or [])],
    }


def otlp(spans) -> str:
    return json.dumps(
        {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    )


def test_otlp_spans_map_to_stages_deepest_first() -> None:
    spans = [
        span("r", "handle_request", 0, 10_000, attrs={"task.group": {"stringValue": "rag"}}),
        span("a", "vector_search", 0, 6_000, "r"),
        span("b", "rerank", 4_000, 6_500, "a"),  # nested and overhanging its parent
        span(
            "c",
            "chat gpt",
            7_000,
            10_000,
            "r",
            attrs={"gen_ai.usage.output_tokens": {"intValue": "250"}},
            events=[("first_token", 7_500)],
        ),
    ]
    st = parse_otlp(otlp(spans))
    assert st.task_group.tolist() == ["rag"]
    got = {k: float(v[0]) for k, v in st.stages.items()}
    # retrieval 0-6.5 s (search, then rerank), idle 6.5-7 s, LLM 7-7.5 prefill, 7.5-10 decode
    assert got == pytest.approx({"retrieval": 6.5, "other": 0.5, "prefill": 0.5, "decode": 2.5})
    assert st.output_tokens.tolist() == [250.0] and st.source == "trace"


def test_otlp_llm_span_without_first_token_is_an_upper_bound_and_maps_are_configurable() -> None:
    spans = [
        span("r", "job", 0, 4_000),
        span("x", "my-tool-call", 0, 1_000, "r"),
        span("y", "chat", 1_000, 4_000, "r"),
    ]
    st = parse_otlp(otlp(spans) + "\n")
    assert float(st.stages["decode"][0]) == pytest.approx(3.0) and "upper bound" in st.source
    assert float(st.stages["tools"][0]) == pytest.approx(1.0)
    st2 = parse_otlp(otlp(spans), StageMap(stages={"retrieval": {"names": ["my-*"]}}))
    assert set(st2.stages) == {"retrieval", "other"}  # "chat" unmapped under this map
    with pytest.raises(TraceError, match="startTimeUnixNano"):
        parse_otlp(
            json.dumps(
                {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "spanId": "s"}]}]}]}
            )
        )
    with pytest.raises(TraceError, match="no spans"):
        parse_otlp("{}")


def test_csv_long_and_wide() -> None:
    long = parse_csv(
        "task_id,task_group,stage,duration_s\n1,rag,retrieval,7\n1,rag,decode,3\n2,rag,decode,1\n"
    )
    assert long.stages["retrieval"].tolist() == [7.0, 0.0] and long.stages["decode"].tolist() == [
        3.0,
        1.0,
    ]
    wide = parse_csv("task_id,task_group,retrieval_s,decode_s,output_tokens\n1,rag,7,3,120\n")
    assert wide.output_tokens.tolist() == [120.0] and np.isnan(wide.input_tokens[0])
    with pytest.raises(TraceError, match="line 2 decode_s"):
        parse_csv("task_id,decode_s\n1,fast\n")
    with pytest.raises(TraceError, match="task_id"):
        parse_csv("id,decode_s\n1,2\n")


def test_stages_command(tmp_path, capsys) -> None:
    p = tmp_path / "tasks.csv"
    p.write_text(
        "task_id,task_group,retrieval_s,prefill_s,decode_s,output_tokens\n"
        "1,rag,7,0.5,2.5,40\n2,rag,7,0.5,2.5,40\n3,writer,0.1,0.4,9.5,600\n"
    )
    assert main(["stages", str(p), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    recs = {r["task_group"]: r for r in doc["recommendations"]}
    assert recs["rag"]["action"] == "fix_first" and recs["rag"]["bottleneck"] == "retrieval"
    assert recs["writer"]["action"] == "pilot"
    assert main(["stages", str(p), "--decode-speedup", "2"]) == 0
    out = capsys.readouterr().out
    assert "writer" in out and "fix_first" in out
    bad = tmp_path / "map.yaml"
    bad.write_text("stages: {retrieval: {nmes: ['x']}}\n")
    assert main(["stages", str(p), "--format", "otlp", "--map", str(bad)]) == 2
    assert "stages.retrieval.nmes" in capsys.readouterr().err
