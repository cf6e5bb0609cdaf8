"""The colours of a report's lines: distinct ones, and one per method throughout a table's
figures."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import seaborn as sns


def line_colours(n: int) -> list:
    """n distinct colours: matplotlib's ten (named, not the current style's cycle, which a
    library may have changed), or evenly spaced hues beyond ten (the ten repeat)."""
    return sns.color_palette("husl" if n > 10 else "tab10", n_colors=max(n, 1))


# Each method's colour while a table's figures are drawn (`method_colours`).
_METHOD_COLOURS: dict[str, tuple] = {}


@contextmanager
def method_colours(names: Sequence[str]) -> Iterator[None]:
    """While the block runs, a line of any of `names` (a table's methods) has one colour in
    every figure, whichever of them a figure shows: a loss is the same colour throughout a
    table's figures (the colours of `line_colours(len(names))`, the names sorted)."""
    found = sorted(set(map(str, names)))
    saved = dict(_METHOD_COLOURS)
    _METHOD_COLOURS.clear()
    _METHOD_COLOURS.update(zip(found, line_colours(len(found)), strict=False))
    try:
        yield
    finally:
        _METHOD_COLOURS.clear()
        _METHOD_COLOURS.update(saved)


def method_colour(name: str) -> tuple | str:
    """A method's colour in the table under way (`method_colours`), else black."""
    return _METHOD_COLOURS.get(str(name), "black")


def hue_colours(values: Sequence) -> list:
    """The lines' colours of these hue values: the table's method colours where every value
    is one of its methods, else `line_colours`."""
    if values and all(str(v) in _METHOD_COLOURS for v in values):
        return [_METHOD_COLOURS[str(v)] for v in values]
    return line_colours(len(values))
