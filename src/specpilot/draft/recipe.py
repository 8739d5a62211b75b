"""``specpilot distill``: corpora -> target continuations -> a distilled draft directory.

Everything slow is cached under ``cache`` (keyed by the target's sha256, seed, length and the
prompt list): rerunning with more ``--minutes`` reuses the generated data and generates more. The time budget is split between
generating teacher data (``gen_fraction``) and training.

    >>> cfg = RecipeConfig(target=default_target_path(), layers=4, minutes=30, out=Path("d4"))  # doctest: +SKIP
    >>> summary = run_recipe(cfg, log=print)                                                 # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specpilot.draft.corpora import (
    build_prompts,
    fetch_corpora,
    workload_eval_texts,
    workload_training_messages,
)
from specpilot.draft.distill import agreement, coverage, head_vocab, train_draft
from specpilot.draft.model import default_init_layers, make_draft
from specpilot.draft.teacher import TeacherSample, generate_teacher_data, load_shards, save_shard
from specpilot.engine.draft_format import (
    draft_spec_path,
    head_ids_of,
    read_draft_meta,
    save_draft_dir,
)
from specpilot.engine.loader import LoadedModel, file_sha256, load_model
from specpilot.engine.model import Transformer
from specpilot.errors import ConfigError

SHARD = 256  # samples per cache shard


@dataclass
class RecipeConfig:
    target: Path
    layers: int
    minutes: float
    out: Path
    cache: Path = Path("build/distill")
    corpora: Path = Path("build/corpora")
    prompts_file: Path | None = None  # JSON [{"group", "ids"}]: skips corpora and tokenizer
    init_layers: list[int] | None = None
    init_draft: str | None = None  # continue from a draft (dir or shipped:NAME): its layers, head
    weights: dict[str, float] | None = None  # prompts per group = per_group x weight
    code_write_share: float = 0.6
    head_vocab: int = 8192
    gen_fraction: float = 0.45
    batch: int = 16
    max_new: int = 160
    max_prompt: int = 192
    per_group: int = 400
    topk: int = 16
    lr: float = 5e-4
    max_tokens: int = 4096
    device: str = "cpu"
    amp: bool = False
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def tokenized_prompts(
    cfg: RecipeConfig, tokenizer: Any, log: Callable[[str], None]
) -> list[tuple[str, list[int]]]:
    if cfg.prompts_file is not None:
        data = json.loads(cfg.prompts_file.read_text())
        return [(d["group"], [int(t) for t in d["ids"]]) for d in data]
    from specpilot.engine.runtime import chat_prompt_ids

    root = fetch_corpora(cfg.corpora)
    exclude = workload_eval_texts()
    prompts = build_prompts(
        root,
        "train",
        cfg.per_group,
        cfg.seed,
        exclude=exclude,
        weights=cfg.weights,
        code_write_share=cfg.code_write_share,
    )
    out: list[tuple[str, list[int]]] = []
    for group, messages in workload_training_messages() * 2:  # twice: greedy and sampled
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = ids if isinstance(ids, list) else ids["input_ids"]
        if len(ids) <= cfg.max_prompt:
            out.append((group, [int(t) for t in ids]))
    random.Random(cfg.seed).shuffle(prompts)  # a deadline then cuts every group alike
    for p in prompts:
        ids = chat_prompt_ids(tokenizer, p.text)
        if len(ids) <= cfg.max_prompt:
            out.append((p.group, ids))
    log(
        f"{len(out)} training prompts ({len(prompts)} from corpora; {len(exclude)} eval texts excluded)"
    )
    return out


def teacher_data(
    cfg: RecipeConfig,
    model: torch.nn.Module,
    prompts: list[tuple[str, list[int]]],
    eos: list[int],
    deadline: float,
    log: Callable[[str], None],
) -> list[TeacherSample]:
    """Cached shards first, then generate for the remaining prompts until ``deadline``."""
    # keyed by the prompt list too: shards are matched to prompts by position
    key = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:8]
    cache = cfg.cache / f"{file_sha256(cfg.target)[:12]}-s{cfg.seed}-n{cfg.max_new}-p{key}"
    samples = load_shards(cache)
    shard = len(list(cache.glob("teacher-*.pt")))
    todo = prompts[len(samples) :]  # prompts cut off by a deadline are simply skipped
    log(f"teacher cache {cache}: {len(samples)} samples; {len(todo)} prompts left")
    buf: list[TeacherSample] = []
    t0, n_tok = time.monotonic(), 0
    gen = generate_teacher_data(
        model,  # type: ignore[arg-type]
        todo,
        batch=cfg.batch,
        max_new=cfg.max_new,
        topk=cfg.topk,
        eos_ids=eos,
        seed=cfg.seed + shard,
        deadline=deadline,
    )
    for s in gen:
        buf.append(s)
        n_tok += s.topk_ids.shape[0]
        if len(buf) == SHARD:
            save_shard(buf, cache / f"teacher-{shard:03d}.pt")
            samples += buf
            buf, shard = [], shard + 1
            log(f"  {len(samples)} samples, {n_tok / (time.monotonic() - t0):.0f} tok/s")
    if buf:
        save_shard(buf, cache / f"teacher-{shard:03d}.pt")
    samples += buf
    return samples


def initial_draft(
    cfg: RecipeConfig, target: LoadedModel, head_ids: torch.Tensor
) -> tuple[Transformer, list[int]]:
    """The draft training starts from (fp32) and the target layers it was first copied from.

    With ``cfg.init_draft`` training continues from that draft: its layers, norm and head ids
    (``head_ids`` is ignored, so the head keeps the vocabulary the draft learned on). Otherwise
    ``cfg.init_layers`` (or the default first/last layers) of the target are copied.
    """
    if cfg.init_draft:
        from specpilot.engine.runtime import load_draft

        draft = load_draft(cfg.init_draft, target, torch.float32)
        if draft is None or head_ids_of(draft) is None:
            raise ConfigError(
                f"--init-draft {cfg.init_draft}: not a distilled draft with a restricted head "
                "(give a draft directory or shipped:NAME)"
            )
        if cfg.layers != draft.cfg.n_layers:
            raise ConfigError(
                f"--layers {cfg.layers} but --init-draft {cfg.init_draft} has "
                f"{draft.cfg.n_layers} layers: pass --layers {draft.cfg.n_layers}"
            )
        meta = read_draft_meta(draft_spec_path(cfg.init_draft))
        return draft, [int(i) for i in meta.get("init_layers") or []]
    init = cfg.init_layers or default_init_layers(target.model.cfg.n_layers, cfg.layers)
    return make_draft(target.model, init, head_ids), init


def run_recipe(cfg: RecipeConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole recipe; returns the summary also written into draft.json."""
    t_start = time.monotonic()
    dev = torch.device(cfg.device)
    deadline_gen = t_start + cfg.minutes * 60.0 * cfg.gen_fraction
    samples, eos, vocab = _teacher_samples(cfg, dev, deadline_gen, log)
    if len(samples) < 4:
        raise ConfigError("too little teacher data: raise --minutes or --gen-fraction")
    gen_s = time.monotonic() - t_start
    held = samples[::20]  # every 20th sample (its own prompt) is held out for agreement
    train = [s for i, s in enumerate(samples) if i % 20]
    ids = head_vocab(train, cfg.head_vocab, eos) if cfg.head_vocab < vocab else torch.arange(vocab)
    cov = coverage(held, ids)
    n_tok = sum(s.topk_ids.shape[0] for s in train)
    log(
        f"teacher data: {len(samples)} samples, {n_tok} train tokens in {gen_s:.0f}s; head {ids.numel()} ids cover {cov:.3f} of held-out tokens"
    )
    draft, init, ids, cov = _starting_draft(cfg, ids, cov, held, log)
    draft = draft.to(dev)
    remaining = max(cfg.minutes * 60.0 - (time.monotonic() - t_start), 30.0) / 60.0
    before, _ = agreement(draft, held[:64], device=dev)
    stats = train_draft(
        draft,
        train,
        minutes=remaining * 0.93,
        lr=cfg.lr,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
        device=dev,
        amp=cfg.amp,
        log=log,
    )
    stats.train_agreement, _ = agreement(draft, train[: len(held)], device=dev)
    stats.heldout_agreement, stats.heldout_agreement_by_group = agreement(draft, held, device=dev)
    log(
        f"agreement: held-out {stats.heldout_agreement:.3f} (untrained {before:.3f}) "
        f"train {stats.train_agreement:.3f} by group {stats.heldout_agreement_by_group}"
    )
    summary = {
        "recipe": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "device": str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev),
        "threads": torch.get_num_threads(),
        "teacher": _teacher_summary(samples, train, n_tok, gen_s),
        "head_vocab": int(ids.numel()),
        "head_coverage_heldout": round(cov, 4),
        "untrained_agreement": round(before, 4),
        "train": stats.to_dict(),
        "wall_s": round(time.monotonic() - t_start, 1),
    }
    if cfg.init_draft:  # the lineage: what this run continued from, with its own summary
        meta = read_draft_meta(draft_spec_path(cfg.init_draft))
        summary["continued_from"] = {"draft": cfg.init_draft, "training": meta.get("training")}
    save_draft_dir(draft.cpu(), cfg.out, target_path=cfg.target, init_layers=init, training=summary)
    write_model_card(cfg.out, summary, init)
    log(f"draft written to {cfg.out} ({summary['wall_s']:.0f}s)")
    return summary


def _teacher_samples(
    cfg: RecipeConfig, dev: torch.device, deadline: float, log: Callable[[str], None]
) -> tuple[list[TeacherSample], list[int], int]:
    """The target (bf16, on ``dev``) decodes the training prompts until ``deadline`` (cached
    shards first): the samples, the target's EOS ids and its vocabulary size."""
    loaded = load_model(cfg.target, dtype=torch.bfloat16, tokenizer=cfg.prompts_file is None)
    target = loaded.model.to(dev)
    eos = [int(loaded.tokenizer.eos_token_id)] if loaded.tokenizer is not None else [2]
    prompts = tokenized_prompts(cfg, loaded.tokenizer, log)
    samples = teacher_data(cfg, target, prompts, eos, deadline, log)
    return samples, eos, target.cfg.vocab_size


def _starting_draft(
    cfg: RecipeConfig,
    ids: torch.Tensor,
    cov: float,
    held: list[TeacherSample],
    log: Callable[[str], None],
) -> tuple[Transformer, list[int], torch.Tensor, float]:
    """The fp32 draft training starts from (``initial_draft``), the target layers it was copied
    from, and its head ids with their held-out coverage (a continued draft's own)."""
    # train in fp32 (master weights); the target itself stays bf16 and is not trained
    fp32_loaded = load_model(cfg.target, dtype=torch.float32, tokenizer=False)
    draft, init = initial_draft(cfg, fp32_loaded, ids)
    if cfg.init_draft:
        ids = head_ids_of(draft)  # type: ignore[assignment]
        cov = coverage(held, ids)
        log(f"continuing from {cfg.init_draft}: its head's {ids.numel()} ids cover {cov:.3f}")
    return draft, init, ids, cov


def _teacher_summary(
    samples: list[TeacherSample], train: list[TeacherSample], n_tok: int, gen_s: float
) -> dict[str, object]:
    return {
        "samples": len(samples),
        "train_tokens": n_tok,
        "generation_s": round(gen_s, 1),
        "by_group": {
            g: sum(s.topk_ids.shape[0] for s in train if s.group == g)
            for g in sorted({s.group for s in train})
        },
    }


def write_model_card(out: Path, summary: dict[str, Any], init_layers: list[int]) -> Path:
    """A first MODEL_CARD.md from the recipe's own numbers (teacher-forced agreement only:
    measure acceptance and speed-up with ``specpilot screen-drafts`` and add them)."""
    tr, te, rc = summary["train"], summary["teacher"], summary["recipe"]
    groups = "\n".join(
        f"| {g} | {te['by_group'].get(g, 0):,} | {a:.3f} |"
        for g, a in tr["heldout_agreement_by_group"].items()
    )
    text = f"""# Distilled draft: {rc["layers"]} layers for {Path(str(rc["target"])).name}

- Layers initialised from target layers {init_layers}; embedding shared with the target (not
  shipped), head restricted to the {summary["head_vocab"]} most generated target tokens (they
  cover {summary["head_coverage_heldout"]:.1%} of held-out target tokens).
- Data: {te["samples"]:,} target continuations ({te["train_tokens"]:,} training tokens, top-{rc["topk"]}
  log-probs), generated in {te["generation_s"]:.0f} s on {summary["device"]}.
- Training: {tr["steps"]:,} steps, {tr["tokens"]:,} tokens, {tr["seconds"]:.0f} s; whole recipe {summary["wall_s"]:.0f} s.
- Teacher-forced top-1 agreement with the target on held-out continuations:
  {tr["heldout_agreement"]:.3f} (train {tr["train_agreement"]:.3f}; {summary["untrained_agreement"]:.3f} at the start of this run).

| group | training tokens | held-out agreement |
|---|---|---|
{groups}

Agreement is not acceptance: run `specpilot screen-drafts --draft NAME={out}` for acceptance per
position, cost per committed token and speed-up per task group.
"""
    path = out / "MODEL_CARD.md"
    path.write_text(text)
    return path
