"""The planted arm: the baseline's own processes reached through a proxy that dilates every
latency the client sees by exactly 1 + f (``loadgen.dilate.DilatingProxy``). Its true effect
against the baseline is known (+f), so the pilot must find it: the report prints what it found
next to the A/A line, and a load level where it was not found cannot carry a direction for any
candidate. It serves no quality pass, compatibility suite or drill (it is the baseline's
engine), and it is never a candidate.
"""

from __future__ import annotations

import time
from typing import Any

from specpilot.backends.protocol import Backend
from specpilot.pilot.steps import ArmSteps


class PlantedBackend:
    """The baseline process's backend seen through the dilating proxy: its endpoint is the
    proxy's; scrapes and response parsing are the baseline engine's own."""

    def __init__(self, base: Backend, factor: float) -> None:
        from specpilot.loadgen.dilate import DilatingProxy

        self.base = base
        self.proxy = DilatingProxy(base.endpoint, factor)

    @property
    def endpoint(self) -> str:
        return str(self.proxy.url)

    def start(self, timeout_s: float = 0.0) -> None:
        self.proxy.start()

    def stop(self) -> None:  # the proxy only: the engine is the baseline's
        self.proxy.stop()

    def scrape(self, *args: Any, **kw: Any) -> Any:
        return self.base.scrape(*args, **kw)

    def __getattr__(self, name: str) -> Any:  # response_extras and the rest: the engine's
        return getattr(self.base, name)


class PlantedSteps(ArmSteps):
    """One planted run: in front of baseline process ``run.process`` (``bases`` by process)."""

    def __init__(self, *args: Any, bases: dict[int, ArmSteps], factor: float) -> None:
        super().__init__(*args)
        self.bases = bases
        self.factor = factor

    def _start(self) -> None:
        base = self.bases[self.run.process]
        backend = PlantedBackend(base.holder["backend"], self.factor)
        backend.start()
        self.holder = {"backend": backend}
        self.url, self.model = backend.endpoint, base.model
        manifest = {
            "planted": {
                "factor": self.factor,
                "of_run": base.run.run_id,
                "upstream": base.url,
                "how": "every latency the client sees dilated by 1 + factor (loadgen.dilate)",
            },
            "hardware": base.rec.manifest.get("hardware", {}),
            "frozen_sha256": base.rec.manifest_sha256,
        }
        self.save(
            status="running",
            manifest=manifest,
            manifest_sha256=base.rec.manifest_sha256,
            started_unix=self.rec.started_unix or time.time(),
        )
        self.warm = True  # the baseline's process is warm

    def finish(self) -> None:
        from specpilot.pilot import armrun

        if armrun.LOAD_STEP not in self.rec.completed_steps:
            raise RuntimeError(f"arm {self.run.arm.name}: measured phases left")
        self.save(status="complete", finished_unix=time.time())
