"""Trial n's parameters are point n of a Sobol sequence: drawn by the trial's number, which the
study's database hands out once, so workers sharing a study never draw the same point, and a
resumed study goes on where it stopped.

Optuna's QMCSampler counts its draws in a study attribute that two workers may read at once,
and then both draw the same point. Here the sequence is not scrambled by dimension but shifted
per coordinate (a Cranley-Patterson rotation, seeded by the coordinate's position): the first
coordinates, the learning rate and weight decay that every loss searches, then take the same
values at the same trial number for every loss, whatever its own parameters.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from scipy.stats import qmc


@lru_cache(maxsize=256)
def sobol_point(number: int, dims: int, seed: int) -> tuple[float, ...]:
    """Point `number` of the unscrambled Sobol sequence in `dims` dimensions, each coordinate
    shifted (mod 1) by a random offset of its own, seeded by (seed, coordinate)."""
    sobol = qmc.Sobol(dims, scramble=False)
    with warnings.catch_warnings():  # single points break the sequence's balance in powers of 2
        warnings.simplefilter("ignore", UserWarning)
        if number:  # (scipy cannot fast-forward by 0 from the start)
            sobol.fast_forward(number)
        point = sobol.random(1)[0]
    shifts = [np.random.default_rng([seed, i]).random() for i in range(dims)]
    return tuple(float((x + s) % 1.0) for x, s in zip(point, shifts, strict=True))


def from_unit(u: float, distribution: BaseDistribution) -> Any:
    """The value at position u in [0, 1) of a distribution (log scale where it is)."""
    if isinstance(distribution, CategoricalDistribution):
        choices = distribution.choices
        return choices[min(int(u * len(choices)), len(choices) - 1)]
    low, high = distribution.low, distribution.high
    if isinstance(distribution, IntDistribution):
        if distribution.log:
            value = math.exp(math.log(low - 0.5) + u * (math.log(high + 0.5) - math.log(low - 0.5)))
        else:
            value = low - 0.5 + u * (high - low + 1)
        return int(min(max(round(value), low), high))
    if not isinstance(distribution, FloatDistribution):
        raise TypeError(f"no Sobol mapping for {distribution!r}")
    if distribution.log:
        return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return low + u * (high - low)


class SobolSampler(optuna.samplers.BaseSampler):
    """Each parameter of `names` (in that order: the coordinates) from point `trial.number` of
    a shifted Sobol sequence; a parameter outside `names` is an error."""

    def __init__(self, names: list[str], seed: int = 0) -> None:
        self.names = list(names)
        self.seed = seed

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution) -> Any:
        if param_name not in self.names:
            raise ValueError(f"{param_name!r} is not among the searched {self.names}")
        point = sobol_point(trial.number, len(self.names), self.seed)
        return from_unit(point[self.names.index(param_name)], param_distribution)
