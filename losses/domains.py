"""The values each loss parameter may take, declared once (issue 69, item 13): for a parameter
of a class of pytorch-metric-learning here, by that class's name (its subclasses inherit it,
and so does a curated loss that wraps the class, `BenchLoss.pml_class`); for a curated loss's
parameter of its own, on the loss (`BenchLoss.domains`).

PML checks few of its parameters, and a bad one failed only at the first step, after the data
loaded, in a traceback (n_bins=0: a division by zero; alpha=0 in MultiSimilarityLoss: 1 / 0).
Only parameters whose bounds are sure are declared: counts, and the scales, temperatures and
fractions that divide or weigh; a margin's sign is left to the loss (some are negative).
Nothing here imports torch or PML: the command line checks its parameters before they load."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Domain:
    """A number of `kind` (int or float) within the bounds given (`low` and `high`, each
    excluded where `*_open`), or one of `words`; `what` says what it is, where the bounds
    alone do not (a margin that is a whole multiple of the angle)."""

    kind: type
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    words: tuple[str, ...] = ()
    what: str = ""

    def __str__(self) -> str:
        """E.g. "an integer >= 1 or 'all'", "a number > 0", "a number >= 0 and <= 1"."""
        text = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
            high = f"< {self.high:g}" if self.high_open else f"<= {self.high:g}"
            text += f" {low} and {high}"
        elif self.low is not None:
            text += f" > {self.low:g}" if self.low_open else f" >= {self.low:g}"
        elif self.high is not None:
            text += f" < {self.high:g}" if self.high_open else f" <= {self.high:g}"
        text = " or ".join((text, *map(repr, self.words)))
        return f"{self.what}: {text}" if self.what else text

    def read(self, text: str) -> Any:
        """`text` as a value of the domain; a ValueError where it is none."""
        if text in self.words:
            return text
        value = (int if self.kind is int else float)(text)  # ValueError for 'abc'
        if not self.holds(value):
            raise ValueError(text)
        return value

    def holds(self, value: Any) -> bool:
        """Whether `value` lies in the domain (a whole float counts as an integer: the short
        options, e.g. --margin, read every number as a float)."""
        if isinstance(value, str):
            return value in self.words
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.kind is int and value != int(value)):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


COUNT = Domain(int, 1)
POSITIVE = Domain(float, 0, low_open=True)
NON_NEGATIVE = Domain(float, 0)
FRACTION = Domain(float, 0, high=1)  # a weight between two terms, a momentum
COUNT_OR_ALL = Domain(int, 1, words=("all",))

# PML class name -> parameter -> its domain. A class's entries hold for its subclasses too
# (SphereFaceLoss's margin is LargeMarginSoftmaxLoss's), unless they declare their own.
PML_DOMAINS: dict[str, dict[str, Domain]] = {
    # One meaning in every PML loss that names them: a divisor, and how many triplets to draw.
    "BaseMetricLossFunction": {"temperature": POSITIVE, "triplets_per_anchor": COUNT_OR_ALL},
    # A regulariser's weight: a negative one rewards growing embeddings (or class weights)
    # without bound, and the run diverges (npair l2_reg=-1), which read as a learning rate's.
    "EmbeddingRegularizerMixin": {"embedding_reg_weight": NON_NEGATIVE},
    "WeightRegularizerMixin": {"weight_reg_weight": NON_NEGATIVE},
    # PML takes cos(m theta) of a whole m and divides by m; 2.5 trained as 2, 0.5 failed.
    "LargeMarginSoftmaxLoss": {
        "margin": Domain(int, 1, what="a whole multiple of the angle"),
        "scale": POSITIVE,
    },
    # Its subclasses ArcFace and CosFace add the margin instead (degrees; a cosine).
    "ArcFaceLoss": {"margin": NON_NEGATIVE},
    "CosFaceLoss": {"margin": NON_NEGATIVE},
    "SubCenterArcFaceLoss": {"sub_centers": COUNT},
    "AngularLoss": {"alpha": Domain(float, 0, True, 90, True, what="an angle in degrees")},
    "CircleLoss": {"gamma": POSITIVE},
    "DynamicSoftMarginLoss": {"num_bins": COUNT, "momentum": FRACTION},
    "FastAPLoss": {"num_bins": COUNT},  # the histogram's bin width divides by it
    "HistogramLoss": {"n_bins": COUNT, "delta": Domain(float, 0, True, 2)},  # delta = 2 / n_bins
    "MultiSimilarityLoss": {"alpha": POSITIVE, "beta": POSITIVE},  # 1 / alpha, 1 / beta
    "NCALoss": {"softmax_scale": POSITIVE},
    "PNPLoss": {"anneal": POSITIVE, "alpha": POSITIVE},  # the sigmoid's temperature, a power
    "ProxyAnchorLoss": {"alpha": POSITIVE},
    "RankedListLoss": {"imbalance": FRACTION, "Tn": NON_NEGATIVE, "Tp": NON_NEGATIVE},
    "SoftTripleLoss": {"centers_per_class": COUNT, "la": POSITIVE, "gamma": POSITIVE},  # 1 / gamma
    "TupletMarginLoss": {"scale": POSITIVE},
}


# Parameters of a PML class one of which must stay below the other: (lower, higher, why).
# Contrastive with pos_margin >= neg_margin trained with its margins inverted, in silence (of
# distances: the harness gives PML's losses no similarity, whose margins run the other way).
PML_ORDERS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ContrastiveLoss": (
        (
            "pos_margin",
            "neg_margin",
            "pairs of a class are pulled within pos_margin, of two classes pushed past neg_margin",
        ),
    ),
}


def pml_orders(pml_class: type) -> tuple[tuple[str, str, str], ...]:
    """The ordered pairs of a PML class's parameters (`PML_ORDERS`): its own, or its bases'."""
    for klass in pml_class.__mro__:
        if klass.__name__ in PML_ORDERS:
            return PML_ORDERS[klass.__name__]
    return ()


def pml_domain(pml_class: type, name: str) -> Domain | None:
    """The domain of the parameter `name` of a PML class: its own, or its nearest base's."""
    for klass in pml_class.__mro__:
        found = PML_DOMAINS.get(klass.__name__, {}).get(name)
        if found is not None:
            return found
    return None
