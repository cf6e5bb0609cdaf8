"""What a run setting may be beyond its type, declared once in its RunConfig field's type
(`epochs: PositiveInt`, `crop_mode: Annotated[str, OneOf(("squash", "aspect"))]`): `run` takes
the field's type, bounds and words as its option's (bench.cli.settings), and so refuses any other
value in one line before anything loads; the report, which reads the plain type, is unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated


@dataclass(frozen=True)
class Bounds:
    """The numbers a setting may take, from `min` to `max` (a bound itself left out where
    `*_open`; a float finite)."""

    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False


@dataclass(frozen=True)
class OneOf:
    """The words a text setting may be, where the module reading them imports torch or faiss
    (bench.data.crops, bench.evaluation.metrics), which `run --help` does not; the other
    lists' packages the command line imports itself (bench.cli.settings)."""

    words: tuple[str, ...]


PositiveInt = Annotated[int, Bounds(min=1)]
NonNegativeInt = Annotated[int, Bounds(min=0)]
NonNegativeFloat = Annotated[float, Bounds(min=0)]
