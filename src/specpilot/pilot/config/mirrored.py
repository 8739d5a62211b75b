"""Where ``episodes.design: mirrored`` may run: every arm of an episode at once, so the arms'
processes must not compete for one machine, or the comparison measures them sharing it.

    >>> from types import SimpleNamespace as A
    >>> def arm(name, urls=(), devices=None):
    ...     return A(name=name, url=urls[0] if urls else None, replicas=list(urls), devices=devices)
    >>> shared_by([arm("b", ["http://10.0.0.1:8000"]), arm("s", ["http://10.0.0.2:8000"])])
    []
    >>> shared_by([arm("b", ["http://127.0.0.1:8001"]), arm("s", ["http://localhost:8002"])])
    ["arms 'b' and 's' on one host (loopback)"]
    >>> shared_by([arm("b"), arm("s", devices=((1,),))])
    ["arm 'b' is started here without devices: of its own"]
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", ""}


class _Arm(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def replicas(self) -> list[str]: ...
    @property
    def devices(self) -> object: ...


def _host(url: str) -> str:
    """The machine a URL names: ``loopback`` for this one (``localhost``, any 127.x, ``::1``,
    this machine's own name); a URL that does not parse is its own text (validation names it
    elsewhere).

        >>> _host("http://127.0.1.1:8000"), _host("http://[::1]:80"), _host("http://[::1")
        ('loopback', 'loopback', 'http://[::1')
    """
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return url
    if host in LOOPBACK or host in (socket.gethostname(), socket.getfqdn()):
        return "loopback"
    try:
        return "loopback" if ipaddress.ip_address(host).is_loopback else host
    except ValueError:
        return host


def _device_sets(d: object) -> set[int]:
    if not isinstance(d, tuple):
        return set()
    out: set[int] = set()
    for x in d:
        out |= set(x) if isinstance(x, tuple) else {int(x)}
    return out


def shared_by(arms: Sequence[_Arm], planted: bool = False) -> list[str]:
    """Why the arms' processes of one mirrored episode may share a machine (empty: they do
    not, as far as the pilot file says): two arms' endpoints on one host; an engine specpilot
    starts without ``devices:`` (it runs on this machine, as the load generator does); two
    arms' device lists that overlap; with a planted arm, two replicas of the baseline on one
    host (the planted arm and the baseline run at once on two of its processes)."""
    why: list[str] = []
    hosts: dict[str, str] = {}
    devices: dict[int, str] = {}
    for a in arms:
        if a.url is None and a.devices in (None, ()):
            why.append(f"arm {a.name!r} is started here without devices: of its own")
            continue
        for h in sorted({_host(u) for u in a.replicas}):
            if h in hosts and hosts[h] != a.name:
                why.append(f"arms {hosts[h]!r} and {a.name!r} on one host ({h})")
            hosts.setdefault(h, a.name)
        for d in sorted(_device_sets(a.devices)):
            if d in devices and devices[d] != a.name:
                why.append(f"arms {devices[d]!r} and {a.name!r} on GPU {d}")
            devices.setdefault(d, a.name)
    if planted and arms:
        base = arms[0]
        seen = [_host(u) for u in base.replicas]
        twice = sorted({h for h in seen if seen.count(h) > 1})
        if twice:
            why.append(
                f"the baseline's replicas on one host ({twice[0]}), where the planted arm runs "
                "beside the baseline"
            )
    return why


def check_mirrored(arms: Sequence[_Arm], processes: int, settings: object) -> None:
    """Raise ``ValueError`` (the field, the reason, the fix) where ``design: mirrored`` cannot
    run as the file asks; ``arms[0]`` is the baseline."""
    in_place = bool(getattr(settings, "in_place", False))
    planted = getattr(settings, "planted", None)
    if in_place:
        raise ValueError(
            "episodes.design: mirrored runs every arm of an episode at once, and "
            "episodes.in_place serves the baseline from the speculative arm's processes, which "
            "cannot be on and off at once -> set episodes.in_place: false, or design: turns"
        )
    if planted and processes < 2:
        raise ValueError(
            "episodes.design: mirrored with a planted arm and 1 process an arm: the planted arm "
            "reaches a baseline process other than the one the baseline runs on at that time, "
            "and there is none -> set episodes.processes to at least 2 (urls: 2 replicas an "
            "arm), or episodes.planted: null"
        )
    why = shared_by(arms, planted=bool(planted))
    if why and not getattr(settings, "share_machine", False):
        raise ValueError(
            f"episodes.design: mirrored: {why[0]}: the arms of an episode run at once and would "
            "compete for that machine, so the comparison would measure them sharing it -> give "
            "each arm machines or devices: of its own, set episodes.design: turns, or set "
            "episodes.share_machine: true to insist (then pin each to cores of its own, e.g. "
            "taskset)"
        )
