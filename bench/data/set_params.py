"""The parameters of a built-in set written in its name (`glyphs:classes=40,size=16`,
`emoji:size=48,min_sets=10`): one parser for every such set, each field's type its dataclass's."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

Spec = TypeVar("Spec")
CONVERT = {"int": int, "float": float, "str": str}


def parse_set_params(cls: type[Spec], name: str, head: str, example: str) -> Spec:
    """`cls` (a frozen dataclass of defaults) with the parameters of `name` ('HEAD' or
    'HEAD:key=value,...') set; a one-line ValueError naming the bad part, and `example`."""
    given_head, _, args = name.partition(":")
    if given_head != head:
        raise ValueError(f"not a {head} data set: {name!r}")
    known = {f.name: CONVERT[type_name(f.type)] for f in fields(cls)}
    given: dict[str, Any] = {}
    for part in filter(None, args.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in known:
            raise ValueError(
                f"bad {head} parameter {part!r} in {name!r}; expected key=value with keys "
                f"{', '.join(known)} (e.g. {example})"
            )
        if key in given:
            raise ValueError(f"{head} parameter {key} is given twice in {name!r}; give it once")
        try:
            given[key] = known[key](value)
        except ValueError:
            kind = {int: "a whole number", float: "a number"}.get(known[key], "text")
            raise ValueError(
                f"bad value {value!r} for {head} parameter {key}: give {kind}"
            ) from None
    return replace(cls(), **given)


def type_name(annotation: Any) -> str:
    # A field's type is its annotation's text where its module defers annotations.
    return annotation if isinstance(annotation, str) else annotation.__name__
