"""The engine configuration that switches speculation on for an adopted candidate, built by
the engine's own adapter (``backends.adapters``: ``launch`` runs the same ``backend(options)``
and ``command()`` / ``flags()`` that started it in the pilot), so the flags deployed are the
flags measured. Only where it listens changes: ``$HOST`` and ``$PORT`` (defaults: loopback,
8000), and the program is named as its project documents it.

- An engine switched in place (the builtin server): one server for every group;
  ``<arm>.strategy.json`` is the strategy table (``--strategy-file``'s format) that turns the
  adopted groups on and keeps the rest at k = 0, applied at start or on the running server
  (``POST /admin/strategy``). A group is a scope two ways: ``tag:<group>`` (the request's
  ``tag`` or ``X-Specpilot-Tag``) and ``model:<group>`` (the server answers the group's name as
  a model alias, so a gateway routes by model name).
- An engine that restarts to switch (vLLM, SGLang, llama.cpp): the adopted groups go to a
  server started with ``<arm>.launch.sh``, the others stay on the current one (the routing
  table); files the launch reads sit beside it (vLLM's ``--speculative-config`` JSON).

    >>> shell_line(["vllm", "serve", "m", "--port", PORT, "--speculative-config", '{"a": 1}'])
    'vllm serve m \\\\\\n  --port "${PORT:-8000}" \\\\\\n  --speculative-config \\'{"a": 1}\\''
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specpilot.backends.adapter import EngineAdapter, Launch
from specpilot.backends.adapters import adapter_of
from specpilot.errors import SpecpilotError
from specpilot.report.rollout.scopes import Adoption


class Raw(str):
    """A shell word written as is (a variable), not quoted."""


HOST, PORT = Raw('"${HOST:-127.0.0.1}"'), Raw('"${PORT:-8000}"')
MEASURED_PORT = 8000  # the builders need a number; the script's $PORT replaces it
REFUSED = (SpecpilotError, ValueError, OSError)  # a builder refusing options stored long ago


@dataclass(frozen=True)
class EngineFiles:
    """What the rollout writes for one adopted candidate, and what the README says of it."""

    files: dict[str, str] = field(default_factory=dict)  # name -> text
    switch: str = "restart"  # runtime (one server, per scope) | restart (a server per config)
    served_model: str | None = None  # the model id a gateway sends to this configuration
    notes: tuple[str, ...] = ()
    note: str = ""  # the adapter's word on its launch flags (rollout_note)


def shell_line(argv: Sequence[str]) -> str:
    """argv as one shell command, a flag and its value per line; ``Raw`` words unquoted."""
    words = [w if isinstance(w, Raw) else shlex.quote(str(w)) for w in argv]
    lines: list[list[str]] = [[]]
    for i, w in enumerate(words):
        if i > 0 and str(argv[i]).startswith("-") and lines[-1]:
            lines.append([])
        lines[-1].append(w)
    return " \\\n  ".join(" ".join(line) for line in lines)


def script(argv: Sequence[str], env: Mapping[str, str], what: str) -> str:
    head = ["#!/bin/sh", f"# {what}", "# HOST, PORT: where it listens (default: loopback, 8000)"]
    head += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    return "\n".join([*head, "exec " + shell_line(argv), ""])


def _listening(argv: list[str]) -> list[str]:
    """``$HOST`` and ``$PORT`` for the values the pilot's builder wrote."""
    out = list(argv)
    for flag, word in (("--host", HOST), ("--port", PORT)):
        if flag in out:
            out[out.index(flag) + 1] = word
    return out


def _prepared(engine: EngineAdapter, a: Adoption) -> dict[str, str]:
    """The files the pilot prepared for this arm (``Asset``: a draft exported to GGUF, a target
    converted for vLLM), by the path its manifest recorded: the files that were measured."""
    role = {"model": "target", "target": "target", "draft": "draft"}
    paths = {m.get("role"): m.get("path") for m in a.manifest.get("models") or []}
    wanted = engine.assets(a.options)
    return {k: str(paths[role.get(k, k)]) for k in wanted if paths.get(role.get(k, k))}


def launch(engine: EngineAdapter, a: Adoption) -> Launch:
    """The candidate's launch as measured, from its validated options through its adapter."""
    dtype = engine.chosen_format(a.manifest)  # the format every builtin arm was pinned to
    files = _prepared(engine, a)
    got = engine.launch(a.options, dtype=dtype, files=files, port=MEASURED_PORT)
    return Launch(_listening(got.argv), got.env, got.files, got.notes)


def strategy_table(a: Adoption) -> dict[str, Any]:
    """The in-place server's table: every group adopted at every load on at the arm's k,
    every other scope (the default, a group adopted only in windows) at k = 0."""
    on = sorted(s.group for s in a.scopes if s.always)
    return {"default": 0, "models": {g: a.k for g in on}, "tags": {g: a.k for g in on}}


def _unstarted(a: Adoption) -> str:
    if a.url is not None:
        return f"arm {a.candidate} was given by URL ({a.url}): specpilot did not start it"
    return (
        f"arm {a.candidate}'s options are not in the stored pilot config, or no longer "
        "validate with this version of specpilot"
    )


def in_place(engine: EngineAdapter, a: Adoption) -> EngineFiles:
    """The strategy table, and the launch that loads the draft and applies it."""
    name = f"{a.candidate}.strategy.json"
    files = {name: json.dumps(strategy_table(a), indent=1, sort_keys=True) + "\n"}
    notes: list[str] = []
    if a.options is not None:
        try:
            got = launch(engine, a)
        except REFUSED as exc:
            return EngineFiles(files, "runtime", None, (_refused(a, exc),), engine.rollout_note)
        scopes = engine.scope_args(a.groups, Raw(f'"$(dirname "$0")/{name}"'))
        what = f"arm {a.candidate}: {a.engine} with its draft loaded and {name} applied"
        files[f"{a.candidate}.launch.sh"] = script([*got.argv, *scopes], got.env, what)
        notes += got.notes
    else:
        notes.append(
            f"{_unstarted(a)}, so no launch command is written; its server must load the "
            "draft and answer each group's name as a model alias for the model scopes to apply"
        )
    return EngineFiles(files, "runtime", None, tuple(notes), engine.rollout_note)


def _served(a: Adoption, model_name: str | None) -> str | None:
    o = a.options
    for v in (model_name, getattr(o, "served_model_name", None), getattr(o, "model", None)):
        if v:
            return str(v)
    return None


def restarted(engine: EngineAdapter, a: Adoption, model_name: str | None) -> EngineFiles:
    """The candidate's launch script and the files it reads."""
    if a.options is None:
        note = (
            f"{_unstarted(a)}, so no launch command is written; it reported these speculative "
            f"settings: {json.dumps(a.manifest.get('speculative') or {}, sort_keys=True)}"
        )
        return EngineFiles({}, "restart", model_name, (note,), engine.rollout_note)
    got = launch(engine, a)
    files = {f"{a.candidate}.{suffix}": text for suffix, text in got.files.items()}
    what = f"arm {a.candidate}: {a.engine} with speculation as measured"
    files[f"{a.candidate}.launch.sh"] = script(got.argv, got.env, what)
    return EngineFiles(files, "restart", _served(a, model_name), got.notes, engine.rollout_note)


def engine_files(a: Adoption, model_name: str | None = None) -> EngineFiles:
    """The configuration files of an adopted candidate (module docstring). A builder that
    refuses the stored options leaves a note, never a report without its other files."""
    engine = adapter_of(a.engine)
    if engine is None:
        return EngineFiles(
            notes=(
                f"arm {a.candidate} runs on {a.engine}, an endpoint specpilot cannot "
                "configure: switch speculation on there as its provider documents",
            )
        )
    if engine.in_place:
        return in_place(engine, a)
    try:
        return restarted(engine, a, model_name)
    except REFUSED as exc:
        return EngineFiles(notes=(_refused(a, exc),), note=engine.rollout_note)


def _refused(a: Adoption, exc: Exception) -> str:
    return (
        f"arm {a.candidate}: its engine's command builder refused its stored options "
        f"({type(exc).__name__}: {exc}), so no launch command is written"
    )


__all__ = ["EngineFiles", "Raw", "engine_files", "launch", "shell_line", "strategy_table"]
