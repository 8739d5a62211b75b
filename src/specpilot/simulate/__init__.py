"""A calibrated serving simulator with speculation (issue 23): past the pilot's machine.

``engine``: the discrete-event model of replicas with continuous batching; ``costs``: the cost
model calibrated from a pilot file (step, prefill, overhead, committed tokens per round per
task group); ``predict``: replay, what-if rates and replicas; ``validation``: the gate;
``crossover``: where a candidate stops beating the baseline. Pure functions over records;
``specpilot simulate`` is the command.
"""

from specpilot.simulate.costs import ArmCosts, calibrate, fit_linear, rounds_needed
from specpilot.simulate.crossover import Crossover, crossover
from specpilot.simulate.engine import SimResult, simulate
from specpilot.simulate.predict import Workload, measured, poisson_workload, predict
from specpilot.simulate.validation import Validation, validate

__all__ = [
    "ArmCosts",
    "Crossover",
    "SimResult",
    "Validation",
    "Workload",
    "calibrate",
    "crossover",
    "fit_linear",
    "measured",
    "poisson_workload",
    "predict",
    "rounds_needed",
    "simulate",
    "validate",
]
