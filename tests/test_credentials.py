"""Credentials for an arm given by URL (issue 49, item 2): ``headers:`` / ``api_key_env:`` in a
pilot file, ``--api-key-env`` / ``--header`` for ``specpilot load``.

Against real servers on loopback: the builtin server with an API key (``serve.apikey``) and,
where a test must see every request's headers (``/metrics`` stays open on the builtin server,
as on vLLM), a small recording server. The token never reaches a file under ``--out`` (the
DuckDB file's bytes and every table's text) or the terminal; the header's name is recorded.
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from specpilot.cli import main
from specpilot.engine.loader import default_target_path, load_tokenizer
from specpilot.errors import ConfigError
from specpilot.pilot.config.credentials import resolve
from specpilot.pilot.config.file import PilotConfigError, parse_pilot
from specpilot.serve import ServerConfig, create_app
from specpilot.store import read_pilot
from test_server import MODEL, TOKEN, LiveServer, make_engine

pytestmark = pytest.mark.timeout(60)
KEY = f"sp-test-{secrets.token_hex(12)}"  # unique: a grep for it finds only a leak
VAR = "SPECPILOT_TEST_CRED_KEY"
WORKLOAD = (
    "name: cred\nseed: 1\ngroups: {structured: {output: {mean: 4}}}\n"
    "warmup: {requests: 1, rate: 10.0}\n"
    "phases: [{name: p, duration_s: 1, arrival: {kind: constant, rate: 4}}]\n"
)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    engine = make_engine(load_tokenizer(default_target_path()), draft=False)
    s = LiveServer(
        create_app(ServerConfig(model_name=MODEL, admin_token=TOKEN, api_key=KEY), engine=engine)
    )
    yield s
    s.stop()


def _arms(**url_arm: Any) -> dict[str, Any]:
    return {
        "workload": "w.yaml",
        "arms": [
            {"name": "b", "role": "baseline", "engine": "openai", "url": "http://h/v1", **url_arm},
            {"name": "s", "role": "speculative", "engine": "openai", "url": "http://h/v1"},
        ],
    }


# -- the config ----------------------------------------------------------------------------


def test_a_literal_credential_in_the_file_is_refused_without_showing_it() -> None:
    with pytest.raises(PilotConfigError) as err:
        parse_pilot(_arms(headers={"Authorization": "Bearer sk-LITERAL-123"}))
    text = str(err.value)
    assert "arms[0].headers.Authorization" in text and "environment variable" in text
    assert "${NAME}" in text and "sk-LITERAL" not in text
    for name in ("X-Api-Key", "api-key", "Cookie"):
        with pytest.raises(PilotConfigError, match="written literally"):
            parse_pilot(_arms(headers={name: "v-LITERAL"}))


def test_references_and_plain_headers_are_kept_as_written() -> None:
    headers = {"Authorization": "Bearer ${" + VAR + "}", "X-Team": "pilots"}
    cfg = parse_pilot(_arms(headers=headers))
    assert cfg.arms[0].headers == headers
    # what the pilot file stores (PilotRecord.config) is the reference, not a value
    assert cfg.model_dump(mode="json")["arms"][0]["headers"] == headers
    assert parse_pilot(_arms(api_key_env=VAR)).arms[0].api_key_env == VAR


@pytest.mark.parametrize(
    ("arm", "where"),
    [
        ({"api_key_env": "K", "headers": {"Authorization": "Bearer ${K}"}}, "api_key_env"),
        ({"api_key_env": "sk-abc"}, "api_key_env"),
        ({"headers": {"X-Key": "${not-a-name}"}}, "headers.X-Key"),
        ({"headers": {"Bad Name": "x"}}, "headers.Bad Name"),
        ({"headers": {"X-Team": "a\nb"}}, "headers.X-Team"),
    ],
)
def test_bad_credentials_name_their_field(arm: dict[str, Any], where: str) -> None:
    with pytest.raises(PilotConfigError) as err:
        parse_pilot(_arms(**arm))
    assert f"arms[0].{where}:" in str(err.value) and "sk-abc" not in str(err.value)


def test_an_arm_specpilot_starts_takes_no_credentials() -> None:
    cfg = _arms()
    cfg["arms"][1] = {"name": "s", "role": "speculative", "engine": "builtin",
                      "options": {"draft": "shipped:x", "k": 2}, "api_key_env": "K"}  # fmt: skip
    with pytest.raises(PilotConfigError, match=r"arms\[1\].api_key_env: .*given by url"):
        parse_pilot(cfg)


def test_an_unset_variable_names_arm_header_and_variable_never_a_value() -> None:
    with pytest.raises(ConfigError) as err:
        resolve("hosted", {"X-Key": "${MISSING_VAR}"}, None, {})
    assert "arm 'hosted': header X-Key needs $MISSING_VAR" in str(err.value)
    assert err.value.fix is not None and "export MISSING_VAR" in err.value.fix
    with pytest.raises(ConfigError) as err:  # a key file read with its newline
        resolve("hosted", {}, "K", {"K": "sk-SECRET\n"})
    assert "line break" in str(err.value) and "sk-SECRET" not in err.value.describe()
    got = resolve("a", {"X-Key": "k=${A};${B}"}, "A", {"A": "1", "B": "2"})
    assert got == {"X-Key": "k=1;2", "Authorization": "Bearer 1"}


# -- every request carries them ------------------------------------------------------------


def test_every_client_sends_the_arms_headers(server: LiveServer) -> None:
    """The model lookup, the fingerprint, the quality pass and the compatibility suite: each
    refused without the key, each answered with it."""
    from specpilot.loadgen.client import served_model
    from specpilot.pilot.run.fingerprint import fingerprint
    from specpilot.quality.compat import run_compat
    from specpilot.quality.runner import QualityRequest, run_quality_pass

    auth = {"Authorization": f"Bearer {KEY}"}
    assert served_model(server.url) == "default"  # the 401 lists no model
    assert served_model(server.url, auth) == MODEL
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        fingerprint(server.url, MODEL, tokens=4, repeats=1)
    assert fingerprint(server.url, MODEL, tokens=4, repeats=1, headers=auth)["samples"]
    req = QualityRequest("g", "p1", ({"role": "user", "content": "hi"},), 0, None, 0.0, 1.0, 3)
    assert run_quality_pass(server.url, MODEL, [req], arm="a")[0].error.startswith("HTTP 401")
    assert run_quality_pass(server.url, MODEL, [req], arm="a", headers=auth)[0].error is None
    [no] = run_compat(server.url, model=MODEL, features=("length",))
    [yes] = run_compat(server.url, model=MODEL, features=("length",), headers=auth)
    assert no.status == "fail" and "401" in no.evidence and yes.status == "pass", yes.evidence


class _Recorder(http.server.ThreadingHTTPServer):
    """Answers ``/v1/models`` and ``/metrics`` (the builtin server's text) and keeps the
    Authorization header of every request it gets."""

    def __init__(self, metrics: str) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.metrics = metrics
        super().__init__(("127.0.0.1", 0), _RecorderHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RecorderHandler(http.server.BaseHTTPRequestHandler):
    server: _Recorder

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        body = (
            json.dumps({"data": [{"id": MODEL}]})
            if self.path == "/v1/models"
            else self.server.metrics
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # a gateway that echoes the key it refuses
        got = self.headers.get("Authorization")
        self.server.seen.append((self.path, got))
        body = json.dumps({"error": f"key {got} is not valid"}).encode()
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_health_check_and_the_scrapes_send_the_headers(server: LiveServer) -> None:
    from specpilot.backends.openai import OpenAIBackend

    rec = _Recorder(httpx.get(server.url + "/metrics").text)
    try:
        be = OpenAIBackend(rec.url + "/v1", engine="builtin", headers={"Authorization": "Bearer t"})
        be.start(timeout_s=5)
        assert be.scrape().metrics  # the builtin parser read the counters
        assert {p for p, _ in rec.seen} == {"/v1/models", "/metrics"}
        assert all(a == "Bearer t" for _, a in rec.seen), rec.seen
        assert "Bearer t" not in repr(be)
    finally:
        rec.shutdown()
        rec.server_close()


def test_a_refusal_that_echoes_the_key_is_recorded_without_it() -> None:
    from specpilot.loadgen import LoadConfig, LoadRunner
    from specpilot.records import ScheduledRequest

    rec = _Recorder("")
    try:
        auth = {"Authorization": f"Bearer {KEY}"}
        cfg = LoadConfig.build(rec.url, headers=auth, progress=False)
        req = ScheduledRequest(0, 0.0, "p", "g", "p0", [{"role": "user", "content": "hi"}], 4)
        [got] = LoadRunner([req], cfg).run().records
        assert rec.seen == [("/v1/chat/completions", f"Bearer {KEY}")]  # it was sent
        assert got.status == "error" and got.error is not None
        assert got.error.startswith("HTTP 401") and "key *** is not valid" in got.error
        assert KEY not in got.error and KEY not in repr(cfg)
    finally:
        rec.shutdown()
        rec.server_close()


def test_a_pilot_with_an_arm_refused_stops_before_anything_runs(server, tmp_path, monkeypatch):
    """The pilot tries every arm by URL first: a 401 is refused before any engine, probe or
    measurement, with the arm, the URL and the fix; the right key passes."""
    from specpilot.pilot.plan.arms import plan_arms
    from specpilot.pilot.plan.engines import check_credentials

    def plans(**b: Any) -> Any:
        cfg = _arms(**b)
        for a in cfg["arms"]:
            a["url"] = server.url + "/v1"
        cfg["arms"][1]["api_key_env"] = VAR
        return plan_arms(parse_pilot(cfg), resolve_files=False)

    monkeypatch.setenv(VAR, KEY)
    with pytest.raises(ConfigError) as err:
        check_credentials(plans())
    text = err.value.describe()
    assert f"arm 'b': {server.url}/v1/models answered 401 without credentials" in text
    assert "api_key_env" in text and KEY not in text
    check_credentials(plans(api_key_env=VAR))
    monkeypatch.setenv(VAR, "sk-WRONG-KEY")
    with pytest.raises(ConfigError) as err:
        check_credentials(plans(api_key_env=VAR))
    text = err.value.describe()
    assert "answered 401 to the credentials sent (Authorization)" in text
    assert f"${VAR}" in text and "sk-WRONG" not in text


# -- specpilot load against the endpoint ----------------------------------------------------


def _load(server: LiveServer, tmp_path: Path, *extra: str) -> tuple[int, Path]:
    wl = tmp_path / "w.yaml"
    wl.write_text(WORKLOAD)
    out = tmp_path / "out" / "run.duckdb"
    out.parent.mkdir(exist_ok=True)
    argv = ["load", server.url + "/v1", "--workload", str(wl), "--out", str(out), "--quiet"]
    return main([*argv, *extra]), out


def test_load_without_credentials_is_refused_and_measures_nothing(server, tmp_path, capsys):
    rc, out = _load(server, tmp_path)
    err = capsys.readouterr().err
    assert rc == 2
    assert f"arm 'baseline': {server.url}/v1/models answered 401 without credentials" in err
    assert "fix:" in err and "--api-key-env" in err
    data = read_pilot(out)
    assert data.requests == [] and data.phases == []
    assert [a.status for a in data.arms] == ["failed"]


def test_load_with_an_unset_variable_writes_nothing(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    rc, out = _load(server, tmp_path, "--api-key-env", VAR)
    err = capsys.readouterr().err
    assert rc == 2 and f"header Authorization needs ${VAR}, which is not set" in err
    assert f"export {VAR}" in err and not out.exists()


def test_a_literal_key_on_the_command_line_is_refused(server, tmp_path, capsys):
    rc, out = _load(server, tmp_path, "--header", f"Authorization: Bearer {KEY}")
    err = capsys.readouterr().err
    assert rc == 2 and "--header: header Authorization is written literally" in err
    assert "single quotes" in err and KEY not in err and not out.exists()


def test_load_with_the_key_leaves_no_trace_of_it(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(VAR, KEY)
    monkeypatch.setenv("SPECPILOT_TEST_TEAM", "pilots")
    rc, out = _load(
        server, tmp_path, "--api-key-env", VAR, "--header", "X-Team: ${SPECPILOT_TEST_TEAM}"
    )
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    data = read_pilot(out)
    assert [r.status for r in data.requests if not r.warmup].count("ok") >= 3
    man = data.arms[0].manifest
    assert man["headers_sent"] == ["Authorization", "X-Team"]
    # the options as written are kept: the variable's name, not its value
    assert data.pilot.config["load"]["api_key_env"] == VAR
    # no trace: the terminal, every file's bytes under --out, every table's text
    assert KEY not in printed.out + printed.err
    files = [p for p in out.parent.rglob("*") if p.is_file()]
    assert out in files
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f
    text = _tables_as_text(out)
    assert "headers_sent" in text and VAR in text  # the dump does reach the manifest
    assert KEY not in text


PILOT = """\
name: cred
workload:
  seed: 1
  groups: {{structured: {{output: {{mean: 4}}}}}}
  phases: [{{name: peak, duration_s: 4, arrival: {{kind: constant, rate: 3}}}}]
arms:
  - {{name: base, role: baseline, engine: openai, url: "{url}/v1", api_key_env: {var}}}
  - {{name: spec, role: speculative, engine: openai, url: "{url}/v1", api_key_env: {var}}}
quality: {{greedy_prompts: 1, sampled_prompts: 1, samples: 2}}
compat: {{features: [length]}}
drill: {{enabled: false}}
"""


def test_a_pilot_by_url_with_the_key_leaves_no_trace_of_it(server, tmp_path, capsys, monkeypatch):
    """The whole pilot (~15 s): fingerprints, episodes, scrapes, quality pass, compatibility
    suite, report; every request with the key, none of its files or lines with it."""
    monkeypatch.setenv(VAR, KEY)
    monkeypatch.setenv("CI", "1")  # plain progress lines
    path = tmp_path / "p.yaml"
    path.write_text(PILOT.format(url=server.url, var=VAR))
    out = tmp_path / "out"
    rc = main(["pilot", str(path), "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    data = read_pilot(out / "pilot.duckdb")
    by_url = [a for a in data.arms if a.arm in ("base", "spec")]
    assert [a.status for a in by_url] == ["complete", "complete"]
    for a in by_url:
        assert a.manifest["headers_sent"] == ["Authorization"]
        assert a.manifest["fingerprint"]["samples"]  # the fingerprint got answers
    assert all(r.http_status != 401 for r in data.requests)
    assert sum(r.status == "ok" for r in data.requests if not r.warmup) >= 10
    assert data.outputs and not any("401" in (o.error or "") for o in data.outputs)
    assert {(c.arm, c.status) for c in data.compat} == {("base", "pass"), ("spec", "pass")}
    assert data.pilot.config["arms"][0]["api_key_env"] == VAR
    assert KEY not in printed.out + printed.err
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"pilot.duckdb", "report.html", "report.json", "report.md"} <= {p.name for p in files}
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f
    text = _tables_as_text(out / "pilot.duckdb")
    assert "headers_sent" in text and KEY not in text


def test_compat_takes_the_key_from_the_environment(server, capsys, monkeypatch):
    monkeypatch.setenv(VAR, KEY)
    argv = ["compat", server.url, "--model", MODEL, "--features", "length"]
    assert main(argv) == 1  # refused: a failed feature, with the 401 as evidence
    assert "HTTP 401" in capsys.readouterr().out
    assert main([*argv, "--api-key-env", VAR]) == 0
    assert KEY not in capsys.readouterr().out


def test_a_pilot_refused_by_its_endpoint_writes_nothing(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(VAR, "sk-WRONG-KEY")
    path = tmp_path / "p.yaml"
    path.write_text(PILOT.format(url=server.url, var=VAR))
    out = tmp_path / "out"
    assert main(["pilot", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "arm 'base': " in err and "answered 401 to the credentials sent" in err
    assert f"check the key in ${VAR}" in err and "sk-WRONG" not in err and not out.exists()


def test_a_dry_run_names_the_headers_and_needs_no_value(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    path = tmp_path / "p.yaml"
    path.write_text(PILOT.format(url="http://127.0.0.1:9", var=VAR))
    assert main(["pilot", str(path), "--dry-run"]) == 0
    assert "headers Authorization (values from the environment)" in capsys.readouterr().out


def _tables_as_text(path: Path) -> str:
    """Every row of every table, as text (DuckDB compresses strings on disk: a byte grep
    alone could miss one)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [
            t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        ]
        return "\n".join(repr(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    finally:
        con.close()
