"""``--dtype auto`` at engine load: probe, look up the cache, calibrate, or skip.

A calibration is cached on disk (``$SPECPILOT_CACHE`` or ``~/.cache/specpilot/calibration``),
keyed by the sha256 of the target and draft weights, the CPU model and kernel flags, usable
cores, torch version and threads, the device and the plan (candidates, batches, k, tolerance),
so a second start on the same machine is instant. ``--calibration force`` (or
``SPECPILOT_CALIBRATION=force``) measures again; ``skip`` measures nothing: an explicit dtype is
used as given and ``auto`` falls back to a rule (bf16 on a GPU or a CPU with native bf16,
otherwise fp32), recorded as such.

    >>> calibration_plan("auto", torch.device("cpu"), batches=[1, 4], k=3).target_points()
    [(1, 1), (1, 4), (4, 1), (4, 4)]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specpilot.engine.calibrate import (
    CalibrationPlan,
    calibrate,
    complete_curve,
    quality_set,
)
from specpilot.engine.calibration import (
    Calibration,
    FormatResult,
    RoleCalibration,
    cache_key,
    load_cached,
    resolve_mode,
    store,
)
from specpilot.engine.draft_format import draft_spec_path
from specpilot.engine.formats import FORMATS, apply_format, parse_format, unavailable_reason
from specpilot.engine.hardware import HardwareProbe, probe
from specpilot.engine.loader import LoadedModel, file_sha256
from specpilot.engine.model import Transformer


def resolve_device(device: str) -> torch.device:
    """``cpu`` or ``cuda[:N]``; a clear error when CUDA is asked for and absent."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"--device must be cpu or cuda[:N], got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device (a CPU build or no GPU)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda[:N], got {device!r}")
    return dev


def calibration_plan(
    dtype: str, device: torch.device, batches: list[int], k: int
) -> CalibrationPlan:
    if dtype == "auto":
        cands = tuple(n for n, f in FORMATS.items() if unavailable_reason(f, device) is None)
        return CalibrationPlan(candidates=cands, batches=tuple(batches), k=k)
    fmt = parse_format(dtype)
    why = unavailable_reason(fmt, device)
    if why is not None:
        raise ValueError(f"--dtype {dtype}: {why}")
    return CalibrationPlan(candidates=(fmt.name,), batches=tuple(batches), k=k, fixed=True)


def weights_fingerprint(path: Path) -> str:
    """sha256 of a model file, or of a directory's weight files (names and contents)."""
    if path.is_file():
        return file_sha256(path)
    files = sorted(
        p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf", ".json")
    )
    return ",".join(f"{p.name}:{file_sha256(p)}" for p in files)


def draft_fingerprint(spec: str | None) -> str | None:
    if spec is None or spec.startswith("truncate:"):
        return spec  # a layer copy is a function of the target
    path = draft_spec_path(spec)
    return weights_fingerprint(path) if path.exists() else spec


def skip_rule(hw: HardwareProbe) -> str:
    """The format ``auto`` falls back to without measuring."""
    native_bf16 = {"avx512_bf16", "amx_bf16"} & set(hw.cpu_flags)
    return "bf16" if hw.kind == "cuda" or native_bf16 else "fp32"


def skipped(plan: CalibrationPlan, hw: HardwareProbe, draft: bool) -> Calibration:
    if plan.fixed:
        name, why = plan.candidates[0], "set explicitly (--dtype); calibration skipped"
    else:
        name = skip_rule(hw)
        why = f"calibration skipped: {name} by rule (bf16 on a GPU or with native bf16, else fp32)"
    role = RoleCalibration("target", [FormatResult(name, status="chosen")], name, why, [])
    drole = RoleCalibration("draft", [], name, why, []) if draft else None
    return Calibration("skipped", "", hw.to_dict(), plan.tolerance, role, drole)


def apply_formats(cal: Calibration, target: Transformer, draft: Transformer | None) -> None:
    """Convert target and draft in place to the calibration's chosen formats."""
    memo: dict[int, tuple[torch.Tensor, torch.nn.Module]] = {}
    apply_format(target, parse_format(cal.target.chosen), memo)
    if draft is not None:
        apply_format(
            draft, parse_format(cal.draft.chosen if cal.draft else cal.target.chosen), memo
        )


def formats_for(
    target_path: Path,
    draft_spec: str | None,
    target: LoadedModel,
    draft: Transformer | None,
    plan: CalibrationPlan,
    mode: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """Give fp32 ``target``/``draft`` their formats: from the cache, measured now, or by rule.

    The models are converted in place; the returned calibration says what and why.
    """
    mode = resolve_mode(mode)
    hw = probe(target.model.embed.weight.device)
    if mode == "skip":
        cal = skipped(plan, hw, draft is not None)
        apply_formats(cal, target.model, draft)
        return cal
    key = cache_key(
        {
            "target": weights_fingerprint(target_path),
            "draft": draft_fingerprint(draft_spec),
            "hardware": hw.cache_fields(),
            "plan": repr(plan),
        }
    )
    cached = load_cached(key) if mode == "auto" else None
    if cached is not None:
        apply_formats(cached, target.model, draft)
        return cached
    say = log or (lambda m: print(f"specpilot calibrate: {m}", file=sys.stderr, flush=True))
    qs = quality_set(target.tokenizer, target.model.cfg.vocab_size)
    t0 = time.perf_counter()
    cal = calibrate(target.model, draft, plan, key=key, hardware=hw.to_dict(), quality=qs, log=say)
    apply_formats(cal, target.model, draft)
    complete_curve(cal.target, target.model, plan)
    cal.seconds = time.perf_counter() - t0
    store(cal)
    say(f"target {cal.target.chosen}: {cal.target.reason}; {cal.seconds:.1f} s")
    return cal
