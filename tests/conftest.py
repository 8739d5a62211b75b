"""Shared fixtures: the real default target (fp32, for exactness) and tiny random models.

Tiny models are built from configs here (seeded random weights, SmolLM2's vocabulary size), so
every engine path runs fast; the real model is loaded once per session.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Engines and servers the tests start skip the load-time weight-format calibration (seconds to a
# minute on a busy machine; the auto default then takes bf16 here by rule). Its own tests set the
# mode explicitly (tests/test_engine_calibration.py).
os.environ.setdefault("SPECPILOT_CALIBRATION", "skip")
# Two cores: one process uses both; under pytest-xdist (`make test` runs 2 workers) each worker
# gets its share, since 2 workers x 2 threads on 2 cores make every torch op wait for a
# descheduled thread.
torch.set_num_threads(max(1, 2 // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

VOCAB = 49152

# The longest files first: under `--dist loadfile --no-loadscope-reorder` (the Makefile) xdist
# hands files to the 2 workers in collection order, so a 4-minute file collected late leaves one
# worker idle at the end (seen: 9 min wall for 14.5 min of CPU; without the flag xdist 3.8 sorts
# files by test count and ran the 1-test end-to-end pilot last). Measured with `pytest
# --durations`; the rest keep their order.
LONGEST_FIRST = (  # a clean clone's `make test`, 2026-12-06, AMD EPYC AVX-512 kind (seconds)
    "test_pilot_e2e.py",  # 443
    "test_replicas.py",  # 257
    "test_vllm_live.py",  # 203 to start vLLM, then its tests
    "test_engine_real.py",  # 114
    "test_pilot_looks.py",  # 111
    "test_rerun.py",  # 92
    "test_compat.py",  # 63
    "test_load_e2e.py",  # 44
    "test_quality_sampled.py",  # 41
    "test_mirrored.py",  # 35
    "test_fleet_scrape.py",  # 36
    "test_fuzz_body.py",  # 30
    "test_server_e2e.py",  # 29
    "test_engine_formats.py",  # 19
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# 24 prompts of mixed kinds: Chinese business text, code, structured JSON, English prose, chat.
PROMPTS = [
    "请写一份关于公司年会安排的通知。",
    "总结以下内容：本季度销售额同比增长百分之十二，主要来自华东地区。",
    "帮我起草一封回复客户投诉的邮件，语气要礼貌。",
    "把这句话翻译成英文：我们将在下周一召开项目评审会议。",
    "Write a Python function that returns the n-th Fibonacci number.",
    'def is_prime(n: int) -> bool:\n    """Return True if n is prime."""\n',
    "Write a Python class Stack with push, pop and peek methods.",
    "Explain what this code does: `print(sum(x * x for x in range(10)))`",
    "Fix the bug: def mean(xs): return sum(xs) / len(xs) + 1",
    'Extract the name and age as JSON: "Alice is 31 years old and lives in Paris."',
    'Return a JSON object with keys "city" and "country" for Tokyo.',
    "Produce a JSON list of three fruits with their colours.",
    '{"task": "classify", "text": "The delivery was late again."} Answer in JSON.',
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe the water cycle in three paragraphs.",
    "What are the benefits of regular exercise?",
    "Write a poem about autumn leaves.",
    "Tell me about the history of the printing press.",
    "Hi! How are you today?",
    "List five tips for a job interview.",
    "What is the capital of France? Answer in one word.",
    "写一段关于春天的散文。",
    "Count from one to twenty in words.",
    "Repeat after me: the quick brown fox jumps over the lazy dog.",
]


def tiny_config(n_layers: int = 2, dim: int = 64, context: int = 512, vocab: int = VOCAB):
    from specpilot.engine.model import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        dim=dim,
        n_layers=n_layers,
        n_heads=4,
        n_kv_heads=2,
        ffn_dim=dim * 2,
        rope_theta=10000.0,
        context_length=context,
        tie_embeddings=False,  # a tied random model just repeats its last token
    )


def tiny_model(seed: int, n_layers: int = 2, dim: int = 64, scale: float = 1.0, vocab: int = VOCAB):
    """A random-weight Llama; ``scale`` sharpens its next-token distributions."""
    from specpilot.engine.model import Transformer

    torch.manual_seed(seed)  # test-only: weights built once, not sampled from during decoding
    m = Transformer(tiny_config(n_layers, dim, vocab=vocab))
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5 * scale / p.shape[-1] ** 0.5)
        m.embed.weight.normal_(0.0, scale)
    return m.eval()


@pytest.fixture(scope="session")
def default_target():
    """The real SmolLM2-135M-Instruct target, fp32 (greedy identity is exact in fp32)."""
    from specpilot.engine.loader import default_target_path, load_model

    return load_model(default_target_path(), dtype=torch.float32)


@pytest.fixture(scope="session")
def served_pair(default_target):
    """A copy of the real target and the shipped draft in the format the tests' servers get by
    rule (bf16 where the CPU has it natively, else fp32: ``SPECPILOT_CALIBRATION=skip``): for
    tests whose subject does not depend on the format (a third less time than fp32 where bf16
    is native). Returns (LoadedModel, draft)."""
    import copy

    from specpilot.engine.autoformat import calibration_plan, formats_for
    from specpilot.engine.loader import default_target_path
    from specpilot.engine.runtime import DEFAULT_DRAFT, load_draft

    target = copy.copy(default_target)
    target.model = copy.deepcopy(default_target.model)
    draft = load_draft(DEFAULT_DRAFT, target, torch.float32)
    assert draft is not None
    # what build_engine does with --calibration skip: the same rule, the same conversion
    plan = calibration_plan("auto", torch.device("cpu"), batches=[1], k=3)
    formats_for(default_target_path(), DEFAULT_DRAFT, target, draft, plan, "skip")
    return target, draft


@pytest.fixture(scope="session")
def tokenizer(default_target):
    return default_target.tokenizer


@pytest.fixture(scope="session")
def chat_ids(tokenizer):
    from specpilot.engine.runtime import chat_prompt_ids

    return [chat_prompt_ids(tokenizer, p) for p in PROMPTS]


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from a second thread and lose 20-50x when the 2 cores are busy
    (a 2-thread op waits for a descheduled worker). Modules of tiny-model tests use it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
