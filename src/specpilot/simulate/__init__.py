"""A calibrated serving simulator with speculation (issue 23): past the pilot's machine.

``engine``: the discrete-event model of replicas with continuous batching; ``costs``: the cost
model calibrated from a pilot file (step, prefill, overhead, committed tokens per round per
task group); ``predict``: replay, what-if rates and replicas, the validation gate;
``crossover``: where a candidate stops beating the baseline. Pure functions over records;
``specpilot simulate`` is the command.
"""

from specpilot.simulate.costs import ArmCosts, calibrate, fit_linear, rounds_needed
from specpilot.simulate.crossover import Crossover, crossover
from specpilot.simulate.engine import SimResult, simulate
from specpilot.simulate.predict import (
    Validation,
    Workload,
    measured,
    poisson_workload,
    predict,
    validate,
)

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
