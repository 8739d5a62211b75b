"""Replicas as processes (issue 49, item 1): an arm by ``urls:`` lists replicas someone else
runs, each one of the arm's processes in the episode design.

The fleet is started by the test as an operator would, with ``specpilot serve`` in processes of
its own (3 plain replicas, 3 with the shipped draft, one thread each, on loopback), never by the
pilot. The pilot then crosses its episodes over the replicas exactly as over processes it
starts: the same design record, the same estimator (a process effect per replica), the planted
arm a dilating proxy in front of each baseline replica.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from specpilot.backends.protocol import SPEC_ROUNDS
from specpilot.cli import main
from specpilot.pilot.config.file import PilotConfigError, parse_pilot
from specpilot.report.schema import validate
from specpilot.store import read_pilot
from test_server import free_port

REPLICAS = 3


def _arm(name: str, role: str, urls: list[str]) -> dict[str, Any]:
    return {"name": name, "role": role, "engine": "builtin", "urls": urls}


def _pilot(base: list[str], spec: list[str], **episodes: Any) -> dict[str, Any]:
    return {
        "workload": "w.yaml",
        "arms": [_arm("b", "baseline", base), _arm("s", "speculative", spec)],
        **({"episodes": episodes} if episodes else {}),
    }


def test_replicas_set_the_processes_and_must_match_them() -> None:
    urls = [f"http://10.0.0.{i}:8000" for i in range(3)]
    cfg = parse_pilot(_pilot(urls, urls[::-1]))
    assert cfg.episodes.processes == 3  # one process per replica
    assert cfg.arms[0].url == urls[0] and cfg.arms[0].replicas == urls
    with pytest.raises(PilotConfigError) as err:
        parse_pilot(_pilot(urls, urls[:2]))
    assert "arm 's' is given by URL with 2 replicas" in str(err.value)
    assert "list 3 replicas under its urls:" in str(err.value)
    with pytest.raises(PilotConfigError, match=r"episodes\.processes: 3"):
        parse_pilot(_pilot(urls, urls, processes=4))
    with pytest.raises(PilotConfigError, match=r"arms\[0\].urls: .*listed twice"):
        parse_pilot(_pilot([urls[0], urls[0], urls[1]], urls))
    both = _pilot(urls, urls)
    both["arms"][0]["url"] = urls[1]
    with pytest.raises(PilotConfigError, match=r"arms\[0\].url: give url: .* or urls:"):
        parse_pilot(both)
    # the stored config (PilotRecord.config) holds url: as the first replica: it reloads
    stored = cfg.model_dump(mode="json")
    assert stored["arms"][0]["url"] == urls[0] and parse_pilot(stored).arms[0].replicas == urls


# -- an operator's fleet -------------------------------------------------------------------


def _serve(port: int, draft: bool) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "specpilot.cli", "serve", "--port", str(port),
           "--threads", "1", "--dtype", "fp32", "--calibration", "skip",
           "--served-model-name", "smol", *([] if draft else ["--no-draft"])]  # fmt: skip
    env = {**os.environ, "SPECPILOT_ADMIN_TOKEN": f"operator-{port}"}  # not the pilot's
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def fleet() -> Iterator[dict[str, list[str]]]:
    started: list[tuple[subprocess.Popen[bytes], str]] = []
    for draft in (False, True):
        for _ in range(REPLICAS):
            port = free_port()
            started.append((_serve(port, draft), f"http://127.0.0.1:{port}"))
    try:
        deadline = time.time() + 240  # six model loads on two cores
        for proc, url in started:
            while True:
                assert proc.poll() is None, f"specpilot serve at {url} exited"
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.time() < deadline, f"{url} never became healthy"
                time.sleep(0.5)
        urls = [u for _, u in started]
        yield {"base": urls[:REPLICAS], "spec": urls[REPLICAS:]}
    finally:
        for proc, _ in started:
            proc.terminate()
        for proc, _ in started:
            proc.wait(30)


PILOT = """\
name: replicas
workload:
  seed: 3
  groups: {{structured: {{output: {{mean: 6}}}}}}
  phases: [{{name: peak, duration_s: 13.5, arrival: {{kind: constant, rate: 2}}}}]
arms:
  - {{name: base, role: baseline, engine: builtin, urls: {base}}}
  - {{name: spec, role: speculative, engine: builtin, urls: {spec}}}
episodes: {{per_level: 9, planted: 0.15}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{features: [length]}}
drill: {{enabled: false}}
"""


@pytest.mark.timeout(600)
def test_a_pilot_crosses_its_episodes_over_the_replicas(fleet, tmp_path, monkeypatch) -> None:
    """Every replica is one process: each serves its arm's runs of the episodes the crossed
    design gives it, the planted arm reaches each baseline replica through its own proxy, and
    the cells are estimated with a process effect over the three replicas."""
    monkeypatch.setenv("CI", "1")
    path = tmp_path / "p.yaml"
    path.write_text(PILOT.format(base=json.dumps(fleet["base"]), spec=json.dumps(fleet["spec"])))
    out = tmp_path / "out"
    assert main(["pilot", str(path), "--out", str(out)]) == 0
    data = read_pilot(out / "pilot.duckdb")
    runs = {".".join(a.run_id.split(".")[-2:]): a for a in data.arms}  # "base.p0"
    for arm in ("base", "spec"):
        for p in range(REPLICAS):
            rec = runs[f"{arm}.p{p}"]
            assert rec.status == "complete" and rec.manifest["endpoint"] == fleet[arm][p]
            assert not rec.manifest["started_by_specpilot"]
    for p in range(REPLICAS):  # a proxy in front of each baseline replica, none shared
        planted = runs[f"planted.p{p}"].manifest["planted"]
        assert planted["upstream"] == fleet["base"][p] and planted["factor"] == 0.15
    design = data.pilot.schedule["design"]
    eps = design["episodes"]
    assert len(eps) == 9 and design["processes"] == REPLICAS
    for arm in ("base", "spec", "planted"):  # crossed: each replica serves a third of them
        served = sorted(e["process"][arm] for e in eps.values())
        assert served == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # the requests of each (arm, episode) went to the replica the design gave it
    by_run = {a.run_id: a.manifest.get("endpoint") for a in data.arms}
    for r in data.requests:
        if r.warmup or r.arm == "planted":
            continue
        want = fleet[r.arm][eps[r.phase]["process"][r.arm]]
        assert by_run[r.run_id] == want, (r.run_id, r.phase)
    doc = json.loads((out / "report.json").read_text())
    assert validate(doc) == []  # a report with a planted arm holds to its own schema
    cells = {
        (c["baseline_arm"], c["candidate_arm"]): c
        for c in doc["comparisons"]
        if c["task_group"] == "structured"
    }
    for pair in (("base", "spec"), ("base", "planted")):
        c = cells[pair]  # estimated by episodes over the replicas as processes
        assert c["unit"] == "episode" and c["clusters"] == 9 and c["df"] is not None
        assert "engine process as a random effect" in c["method"]


def test_replicas_that_report_different_configurations_are_refused_before_measuring(
    tmp_path, capsys
) -> None:
    """One arm's replicas must run one configuration: a replica serving a draft listed beside a
    plain one is refused by name (what each reports of itself, ``backends.replicas``) before
    any request is measured."""
    from specpilot.engine.loader import default_target_path, load_tokenizer
    from specpilot.serve import ServerConfig, create_app
    from test_server import MODEL, TOKEN, LiveServer, make_engine

    tok = load_tokenizer(default_target_path())

    def server(draft: bool) -> LiveServer:
        config = ServerConfig(model_name=MODEL, admin_token=TOKEN,
                              draft_name="tiny-draft" if draft else None)  # fmt: skip
        return LiveServer(create_app(config, engine=make_engine(tok, draft=draft)))

    servers = [server(draft) for draft in (False, True, False)]
    try:
        plain, spec, other = (s.url for s in servers)
        path = tmp_path / "p.yaml"
        path.write_text(
            PILOT.format(base=json.dumps([plain, spec]), spec=json.dumps([other, spec]))
        )
        out = tmp_path / "out"
        assert main(["pilot", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "arm 'base': speculative settings differ between replicas" in err
        assert f"at {spec}" in err and "run one configuration" in err
        assert "list under urls: only replicas started alike" in err
        assert not (out / "pilot.duckdb").exists()
    finally:
        for s in servers:
            s.stop()


LLAMA_PILOT = """\
name: llama-replicas
workload:
  seed: 5
  groups: {{structured: {{output: {{mean: 8}}}}}}
  phases: [{{name: peak, duration_s: 6, arrival: {{kind: constant, rate: 2}}}}]
arms:
  - {{name: base, role: baseline, engine: llamacpp, urls: {base}}}
  - {{name: spec, role: speculative, engine: llamacpp, urls: {spec}}}
episodes: {{per_level: 6, planted: 0.15}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{features: [length]}}
drill: {{enabled: false}}
"""


@pytest.mark.timeout(300)
def test_llamacpp_replicas_are_processes_too(tmp_path, monkeypatch) -> None:
    """2 plain and 2 n-gram llama.cpp servers (xllamacpp, each a process the test starts) as
    two arms by urls:: the same crossing, the planted proxies in front of the plain replicas,
    llama.cpp's own counters scraped from each replica."""
    pytest.importorskip("xllamacpp")
    from specpilot.backends.llamacpp import LlamaCppBackend, LlamaCppConfig
    from specpilot.engine.loader import default_target_path

    target = str(default_target_path())
    configs = [LlamaCppConfig(model=target, threads=1, n_ctx=1024) for _ in range(2)]
    configs += [
        LlamaCppConfig(model=target, threads=1, n_ctx=1024, spec_type="ngram-mod") for _ in range(2)
    ]
    servers = [LlamaCppBackend(c) for c in configs]
    try:
        for s in servers:
            s.start()
        urls = [s.endpoint for s in servers]
        monkeypatch.setenv("CI", "1")
        path = tmp_path / "p.yaml"
        path.write_text(LLAMA_PILOT.format(base=json.dumps(urls[:2]), spec=json.dumps(urls[2:])))
        out = tmp_path / "out"
        assert main(["pilot", str(path), "--out", str(out)]) == 0
    finally:
        for s in servers:
            s.stop()
    data = read_pilot(out / "pilot.duckdb")
    ends = {(a.arm, a.manifest.get("endpoint")) for a in data.arms if a.arm in ("base", "spec")}
    assert ends == {("base", urls[0]), ("base", urls[1]), ("spec", urls[2]), ("spec", urls[3])}
    ups = {a.manifest["planted"]["upstream"] for a in data.arms if a.arm == "planted"}
    assert ups == set(urls[:2])
    # llama.cpp's own speculative counters, from each n-gram replica's /metrics
    drafted = [s.metrics.get(SPEC_ROUNDS) for s in data.snapshots if s.arm == "spec"]
    assert any(d for d in drafted if d), drafted
    doc = json.loads((out / "report.json").read_text())
    assert validate(doc) == []
