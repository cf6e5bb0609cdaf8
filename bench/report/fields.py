"""What each field the report reads from a run's metrics.json and config.json may hold. A field
of another type or outside its range makes the run's record unusable, named with its value and
what is allowed, rather than read into a table: dims 0 or 1e12, loss '' and epochs -3 were
read as they stood (issue 69)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import get_type_hints

from bench.evaluation.health import HEALTH_KEYS
from bench.runs.config import NOT_HASHED, RunConfig, declared_values
from bench.runs.values import Bounds

# A size or seed is at most this: faiss takes a dimension, numpy's legacy generator a seed, as
# a C int (`run --seed` refuses more); no run could have recorded a larger one.
INT_MOST = 2**31 - 1


@dataclass(frozen=True)
class Allowed:
    """A test of a field's value, and what it allows in words ('an integer from 1 to ...')."""

    test: Callable[[object], bool]
    text: str

    def __call__(self, value: object) -> bool:
        return self.test(value)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON's true is no size


def is_finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(least: int, most: int = INT_MOST) -> Allowed:
    return Allowed(lambda v: is_int(v) and least <= v <= most, f"an integer from {least} to {most}")


def within(bounds: Bounds) -> Allowed:
    """A finite number within a float setting's `Bounds`."""
    least, most = bounds.min, math.inf if bounds.max is None else bounds.max

    def test(v: object) -> bool:
        if not is_finite(v):
            return False
        return (least < v if bounds.min_open else least <= v) and (
            v < most if bounds.max_open else v <= most
        )

    if bounds.min_open:
        return Allowed(test, f"a number > {least:g}")
    if most == math.inf:
        return Allowed(test, f"a number >= {least:g}")
    if bounds.max_open:
        return Allowed(test, f"a number >= {least:g} and < {most:g}")
    return Allowed(test, f"a number from {least:g} to {most:g}")


def or_null(allowed: Allowed) -> Allowed:
    return Allowed(lambda v: v is None or allowed(v), f"{allowed.text} or null")


TEXT = Allowed(lambda v: isinstance(v, str), "text")
NAME = Allowed(lambda v: isinstance(v, str) and v.strip() != "", "a name (text, not empty)")
FLAG = Allowed(lambda v: isinstance(v, bool), "true or false")
RECORD = Allowed(lambda v: isinstance(v, dict), "a JSON object")
# NaN or null: not measured (an embedding too small for it).
MEASURE = Allowed(
    lambda v: v is None or (is_finite(v) and v >= 0) or (isinstance(v, float) and math.isnan(v)),
    "a number >= 0, NaN or null",
)
WARNINGS = Allowed(
    lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(w, str) for w in v)),
    "a list of text",
)

# Beyond their type: the bounds `run` takes each setting in (its RunConfig field's `Bounds`),
# widened where a run records another value (a baseline's 0 epochs, a train_per_class of 0: all
# images, an earlier version's batch of 1), and the sizes that no option sets.
WIDENED = {"epochs": 0, "train_per_class": 0, "batch_size": 1, "dims": 1, "seed": 0}


def ranges() -> dict[str, Allowed]:
    """The bounded settings a run's record names (their field's `Bounds`) and `WIDENED`'s, and
    what each allows."""
    found = {}
    for name in (f.name for f in fields(RunConfig) if f.name not in NOT_HASHED):
        kind, bounds = declared_values(name)
        if isinstance(bounds, Bounds):
            found[name] = integer(int(bounds.min)) if kind is int else within(bounds)
    return {**found, **{name: integer(least) for name, least in WIDENED.items()}}


RANGES = ranges()
FINITE = Allowed(is_finite, "a finite number")
BY_TYPE = {int: integer(0), float: FINITE, str: TEXT, bool: FLAG, dict: RECORD}
# What names a run's row and table: never empty.
NAMES = ("dataset", "loss", "protocol")
# Written as null by some version: none, or not recorded.
NULLABLE = (
    *("miner", "family", "features", "weights", "sampler", "preset", "tuned", "warnings"),
    *("data_location", "data_fingerprint", "data_protocol", "loss_params", "m_per_class"),
)
OTHERS = {
    "weights": TEXT,
    "features": TEXT,
    "family": TEXT,
    "miner": TEXT,
    "sampler": TEXT,
    "data_protocol": TEXT,  # a linear method's runs: the split they follow
    "warnings": WARNINGS,
    "resolved_loss_params": RECORD,
    **dict.fromkeys(HEALTH_KEYS, MEASURE),
}


def setting_types() -> dict[str, type]:
    """RunConfig's fields by their type (int, float, str, bool, dict)."""
    hints = get_type_hints(RunConfig)
    return {f.name: getattr(hints[f.name], "__origin__", hints[f.name]) for f in fields(RunConfig)}


def allowed_values() -> dict[str, Allowed]:
    """Each field the report reads (RunConfig's settings, the fields a run adds) and what it
    may hold."""
    found = {k: BY_TYPE[t] for k, t in setting_types().items() if k not in NOT_HASHED}
    found |= {"preset": TEXT, **OTHERS, **RANGES, **dict.fromkeys(NAMES, NAME)}
    return {k: or_null(a) if k in NULLABLE else a for k, a in found.items()}


ALLOWED = allowed_values()
# The settings the report takes from config.json where metrics.json lacks them (bench.report.runs
# run_record); config.json's other fields (dims, seed, ...) are metrics.json's to say.
FROM_CONFIG = (
    *(k for k in ALLOWED if k in setting_types() and k not in (*NAMES, "dims", "seed")),
    *("weights", "resolved_loss_params"),
)


def field_fault(record: Mapping[str, object], keys: tuple[str, ...] | None = None) -> str:
    """What makes a record's fields unusable ('' where nothing): the first field the report
    reads (of `keys`, else all it reads) that holds what it does not allow, with its value and
    what is allowed. A field absent is not checked here (its default is read)."""
    for key in ALLOWED if keys is None else keys:
        if key in record and key in ALLOWED and not ALLOWED[key](record[key]):
            return f"has {key} = {record[key]!r}, not {ALLOWED[key].text}"
    return ""
