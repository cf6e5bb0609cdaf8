"""The one line an error is reported by."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def first_line(err: BaseException) -> str:
    """The first line of an error's message, or its type's name where it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def check_known(kind: str, name: str, given: Iterable[str], defaults: Mapping[str, Any]) -> None:
    """A ValueError naming the parameters of `given` that the `kind` `name` (a loss, a linear
    method) does not take, and those it does, with their defaults."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(
            f"{kind} {name!r} does not take {', '.join(unknown)}; it takes: {takes(defaults)}"
        )


def takes(defaults: Mapping[str, Any]) -> str:
    """'sigma=1.0, k=100', or 'no parameters'."""
    return ", ".join(f"{name}={value}" for name, value in defaults.items()) or "no parameters"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean nngk?)' where a choice is close to `name` (difflib's ratio of 0.6 or
    more, the closest first); '' where none is."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=3)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
