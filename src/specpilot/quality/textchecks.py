"""Checks on the answer's text: regex, required / forbidden content, figures, length, lines.

Each function takes the answer and the check's resolved parameters and returns
``(passed, reasons, score, detail)``; reasons name the key error ("missing: '9点'", "amount
5000元 changed to 500元", "too short: 120 words < 150").

    >>> numeric("金额为人民币5,000元，于11月18日支付。", {"values": ["5000元", "11月18日"]})[0]
    True
    >>> numeric("金额为500元。", {"values": ["5000元"]})[1]
    ['figure 5000元 changed: the answer has 500元']
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

Outcome = tuple[bool, list[str], float | None, dict[str, Any]]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_NUM = r"\d+(?:\.\d+)?"


def normalise(text: str) -> str:
    """Full-width to half-width (NFKC), thousands separators and spaces around digits removed."""
    t = unicodedata.normalize("NFKC", text)
    t = re.sub(r"(?<=\d)[,，](?=\d{3}\b)", "", t)
    t = re.sub(r"(?<=\d)[,，](?=\d{3}(?!\d))", "", t)
    return re.sub(r"(?<=\d)\s+(?=\D)|(?<=\D)\s+(?=\d)", "", t)


def _shorten(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def regex(text: str, p: dict[str, Any]) -> Outcome:
    flags = (
        (re.IGNORECASE if p.get("ignore_case") else 0)
        | (re.MULTILINE if p.get("multiline") else 0)
        | (re.DOTALL if p.get("dotall") else 0)
    )
    m = re.search(p["pattern"], text, flags)
    if p.get("must_match", True):
        return (
            m is not None,
            [] if m else [f"pattern not found: {_shorten(p['pattern'])}"],
            None,
            {},
        )
    if m is None:
        return True, [], None, {}
    return False, [f"forbidden pattern found: {_shorten(m.group(0))!r}"], None, {"at": m.start()}


def _fold(s: str, case: bool) -> str:
    s = re.sub(r"\s+", " ", normalise(s)).strip()
    return s if case else s.casefold()


def required(text: str, p: dict[str, Any]) -> Outcome:
    case = bool(p.get("case_sensitive"))
    t = _fold(text, case)
    all_of = list(p.get("all_of") or [])
    any_of = list(p.get("any_of") or [])
    reasons = [f"missing: {s!r}" for s in all_of if _fold(s, case) not in t]
    if any_of and not any(_fold(s, case) in t for s in any_of):
        reasons.append("none of: " + ", ".join(repr(s) for s in any_of))
    n = len(all_of) + (1 if any_of else 0)
    score = 1.0 - (len(reasons) / n) if n else 1.0
    return not reasons, reasons, score, {}


def forbidden(text: str, p: dict[str, Any]) -> Outcome:
    case = bool(p.get("case_sensitive"))
    t = _fold(text, case)
    reasons = [f"forbidden content: {s!r}" for s in p.get("terms") or [] if _fold(s, case) in t]
    flags = 0 if case else re.IGNORECASE
    for pat in p.get("patterns") or []:
        m = re.search(pat, text, flags)
        if m:
            reasons.append(f"forbidden content: {_shorten(m.group(0))!r}")
    return not reasons, reasons, None, {}


# -- figures ---------------------------------------------------------------------------------


def _time_variants(num: str) -> list[str]:
    """'5点' also reads '5:00', '17点', '17:00' (a prompt's 下午5点 may come back on a 24h clock)."""
    h = int(float(num))
    out = []
    for x in [h] + ([h + 12] if h < 12 else []):
        out += [f"{x}点", f"{x}:00", f"{x:02d}:00"]
    return out


def _found(t: str, v: str) -> bool:
    """``v`` in ``t``, not as the tail of a longer number (5000元 is not inside 15000元)."""
    return re.search(rf"(?<![\d.]){re.escape(v)}", t) is not None


def _split(fig: str) -> tuple[str, str] | None:
    m = re.fullmatch(rf"({_NUM})(\D{{1,4}})", normalise(fig))
    return (m.group(1), m.group(2)) if m else None


def _figure(t: str, fig: str, expected: set[tuple[str, str]]) -> str | None:
    """None when the figure is in the normalised answer ``t``, else the reason. A number with a
    unit ("5000元") that is absent but another number carries that unit is reported changed
    (numbers that are themselves expected figures do not count)."""
    f = normalise(fig)
    nu = _split(fig)
    if nu is None:  # composite: 11月18日, 021-68881234, 8:30
        return None if _found(t, f) else f"figure {fig} missing"
    num, unit = nu
    if any(_found(t, v) for v in (_time_variants(num) if unit == "点" else [f])):
        return None
    others = [
        x
        for x in re.findall(rf"(?<![\d.])({_NUM}){re.escape(unit)}", t)
        if (x, unit) not in expected
    ]
    if others:
        return f"figure {fig} changed: the answer has {others[0]}{unit}"
    return f"figure {fig} missing"


def _within(x: float, v: dict[str, Any]) -> bool:
    tol = max(
        float(v.get("tolerance") or 0.0), float(v.get("rel_tolerance") or 0.0) * abs(v["value"])
    )
    return abs(x - float(v["value"])) <= tol + 1e-12


def _value(t: str, v: dict[str, Any]) -> str | None:
    unit = normalise(str(v.get("unit") or ""))
    label = v.get("label") or f"{v['value']:g}{unit}"
    found = [float(x) for x in re.findall(rf"(?<![\d.])({_NUM})\s*{re.escape(unit)}", t)]
    if any(_within(x, v) for x in found):
        return None
    if found:
        return f"{label} changed: the answer has {found[0]:g}{unit}"
    return f"{label} missing"


def numeric(text: str, p: dict[str, Any]) -> Outcome:
    """Each figure (string or {value, unit, tolerance}) must appear unchanged in the answer."""
    t = normalise(text)
    reasons = []
    values = list(p.get("values") or [])
    expected = {nu for v in values if isinstance(v, str) and (nu := _split(v)) is not None}
    for v in values:
        r = _figure(t, v, expected) if isinstance(v, str) else _value(t, v)
        if r is not None:
            reasons.append(r)
    score = 1.0 - len(reasons) / len(values) if values else 1.0
    return not reasons, reasons, score, {"figures": len(values)}


# -- length and lines ------------------------------------------------------------------------


def measure(text: str, unit: str) -> tuple[int, str]:
    """Length of the answer in ``unit`` (``auto``: CJK characters when the text is mostly CJK)."""
    if unit == "auto":
        cjk = len(_CJK.findall(text))
        unit = "chars" if cjk > 0.3 * max(len(re.sub(r"\s", "", text)), 1) else "words"
    if unit == "words":
        return len(re.findall(r"\S+", text)), "words"
    return len(re.sub(r"\s", "", text)), "chars"


def length(text: str, p: dict[str, Any]) -> Outcome:
    n, unit = measure(text, str(p.get("unit") or "auto"))
    lo, hi = p.get("min"), p.get("max")
    of = p.get("of")
    if p.get("min_fraction") is not None and of is not None:
        lo = max(lo or 0, round(float(p["min_fraction"]) * float(of)))
    if p.get("max_fraction") is not None and of is not None:
        cap = round(float(p["max_fraction"]) * float(of))
        hi = cap if hi is None else min(hi, cap)
    reasons = []
    if lo is not None and n < lo:
        reasons.append(f"too short: {n} {unit} < {lo}")
    if hi is not None and n > hi:
        reasons.append(f"too long: {n} {unit} > {hi}")
    return not reasons, reasons, float(n), {"unit": unit, "min": lo, "max": hi}


def lines(text: str, p: dict[str, Any]) -> Outcome:
    n = sum(1 for line in text.splitlines() if line.strip())
    reasons = []
    if p.get("min") is not None and n < p["min"]:
        reasons.append(f"too few lines: {n} < {p['min']}")
    if p.get("max") is not None and n > p["max"]:
        reasons.append(f"too many lines: {n} > {p['max']}")
    return not reasons, reasons, float(n), {}
