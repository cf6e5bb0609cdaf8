"""Loss parameters on the command line: `--loss-param NAME=VALUE`, repeatable, for any parameter
of any loss (`nngk-bench losses` lists them with their defaults). A value is read as a value of
the parameter's declared domain where it has one (losses/domains.py: n_bins an integer >= 1),
else as the type of its default (true/false/1/0 for a bool); the parameters are checked
against what the loss takes and by building the loss once, so that a bad one is a one-line
error before the data loads and anything is written. The options each parameter had of its
own (--sigma, --miner, ...) stay, as short spellings of --loss-param in `run`."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable

import click

from bench.cli.options import NON_NEGATIVE, POSITIVE, POSITIVE_FLOAT, stacked
from bench.util.errors import first_line, takes

if TYPE_CHECKING:  # losses imports torch and PML: only when a loss's parameters are read
    from losses.domains import Domain


def loss_param_option(
    text: str = "A parameter of the loss, e.g. sigma=1.0; repeat it for several.",
) -> Callable:
    """--loss-param NAME=VALUE, repeatable; `text`: what it applies to in the command."""
    more = " `nngk-bench losses` lists each loss's parameters and defaults."
    return click.option(
        "--loss-param", "loss_param", multiple=True, metavar="NAME=VALUE", help=text + more
    )


# The options each loss parameter had of its own, short for --loss-param: click's keyword
# arguments, by option. Each sets the parameter of its name, --fixed-weights learn_weights=false.
SHORT_OPTIONS = {
    "miner": dict(help="A miner (see `losses`): triplet's, or pml:ClassName, any of PML's."),
    "regularizer": dict(help="A pml: loss's regularizer, pml:ClassName (see `losses`)."),
    "sigma": dict(type=POSITIVE_FLOAT, help="NNGK kernel width."),
    "k": dict(type=POSITIVE, help="NNGK neighbours per example."),
    "update_interval": dict(type=POSITIVE, help="NNGK epochs between refreshes."),
    "index": dict(
        type=click.Choice(["auto", "exact", "ivf"]),
        help="NNGK neighbour search at refresh: exact, approximate (IVF, its recall logged), or "
        "auto (IVF from 100,000 training items on the CPU; exact on a GPU). Default: auto.",
    ),
    "nprobe": dict(type=POSITIVE, help="NNGK IVF lists probed (default 16)."),
    "margin": dict(
        type=NON_NEGATIVE,
        help="The loss's margin (--loss-param margin=M); arcface's is in degrees.",
    ),
    "fixed_weights": dict(is_flag=True, help="NNGK: centre weights fixed at 1 (Table 5)."),
}
# option -> the loss parameter it sets
ALIASES = {**{option: option for option in SHORT_OPTIONS}, "fixed_weights": "learn_weights"}
# The parameters whose short spelling bounds them, and the bounds, for --loss-param too.
RANGES = {
    ALIASES[option]: given["type"]
    for option, given in SHORT_OPTIONS.items()
    if isinstance(given.get("type"), (click.IntRange, click.FloatRange))
}


def check_range(name: str, text: str, kind: click.ParamType) -> None:
    """A ValueError where --loss-param NAME=TEXT lies outside the bounds its short spelling
    (--NAME) has: the two spellings of one parameter accept the same values."""
    try:
        kind.convert(text, None, None)
    except click.BadParameter as err:
        raise ValueError(f"bad --loss-param {name}={text}: {err.message}") from None


# --loss-param and its short spellings.
loss_param_options = stacked(
    loss_param_option(
        "A parameter of the loss, e.g. sigma=1.0; repeat it for several. The options below "
        "(--miner to --fixed-weights) are short for it."
    ),
    *(
        click.option("--" + option.replace("_", "-"), default=None, **given)
        for option, given in SHORT_OPTIONS.items()
    ),
)


def given_params(options: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Take --loss-param and its short spellings out of a command's keyword arguments: (the
    NAME=VALUE pairs by name, the short spellings' values by parameter)."""
    given = {ALIASES[o]: options.pop(o) for o in ALIASES if o in options}
    if "learn_weights" in given:  # --fixed-weights: True, or None (older click: False)
        given["learn_weights"] = False if given["learn_weights"] else None
    aliases = {name: value for name, value in given.items() if value is not None}
    return name_values(options.pop("loss_param", ())), aliases


def name_values(pairs: tuple[str, ...]) -> dict[str, str]:
    """('sigma=1', 'k=50') -> {'sigma': '1', 'k': '50'}; a ValueError for a pair without a
    name, or for one name given two values."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not equals or not name:
            raise ValueError(f"bad --loss-param {pair!r}; expected NAME=VALUE, e.g. sigma=1.0")
        if found.get(name, value) != value:
            raise ValueError(f"--loss-param {name} is given twice: {found[name]} and {value}")
        found[name] = value
    return found


def parsed(name: str, text: str, default: Any, loose: bool = False) -> Any:
    """`text` as the type of the parameter's default; a ValueError naming what it expects.
    A text default (PML's triplets_per_anchor='all') takes a number too; `loose` (PML's
    signatures, whose whole-number defaults are often margins): an int default a fraction."""
    if default is None or isinstance(default, str):  # no type to read it as, or a text's
        return number_or_text(text)
    if loose and isinstance(default, int) and not isinstance(default, bool):
        default = 0 if text.strip().lstrip("+-").isdigit() else 0.0  # '2' stays 2 (its run id)
    try:
        if isinstance(default, bool):
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            value = float(text)
            if not math.isfinite(value):  # a NaN passes every bound the loss checks
                raise ValueError(text)
            return value
    except (KeyError, ValueError):
        kind = {bool: "true or false", int: "an integer", float: "a finite number"}[type(default)]
        raise ValueError(f"bad --loss-param {name}={text}; expected {kind}") from None
    return text


def read(name: str, text: str, default: Any, domain: Domain | None, loose: bool) -> Any:
    """`text` as a value of the parameter's declared domain (losses/domains.py), checked
    here, before the data loads: a one-line ValueError naming the parameter and its domain
    (n_bins=0 divided by zero at the first step); as the type of its default where it has
    none (`parsed`)."""
    if domain is None:
        return parsed(name, text, default, loose)
    try:
        return domain.read(text)
    except ValueError:
        raise ValueError(f"bad --loss-param {name}={text}: {name} is {domain}") from None


def check_alias(name: str, value: Any, domain: Domain | None, aliases: dict[str, Any]) -> None:
    """A ValueError where a short spelling's value (--margin 2.5) lies outside the declared
    domain of the parameter it sets."""
    if domain is not None and not domain.holds(value):
        raise ValueError(f"bad {spelled(name, aliases)} {value}: {name} is {domain}")


def number_or_text(text: str) -> int | float | str:
    """'3' -> 3, '0.5' -> 0.5, anything else as it is (a finite number only: NaN passes every
    bound a loss checks)."""
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if isinstance(value, int) or math.isfinite(value):
            return value
        raise ValueError(f"bad --loss-param value {text}; expected a finite number")
    return text


def spelled(name: str, aliases: dict[str, Any]) -> str:
    """How the user gave the parameter `name`: its short option, or --loss-param NAME."""
    if name in aliases:
        option = next(o for o, param in ALIASES.items() if param == name)
        return "--" + option.replace("_", "-")
    return f"--loss-param {name}"


def loss_params(loss: str, pairs: dict[str, str], aliases: dict[str, Any] | None = None) -> dict:
    """The parameters given for `loss`, parsed and checked (a one-line ValueError): each one
    the loss takes; a short spelling and --loss-param of one parameter agree; a miner known;
    the loss builds with them."""
    from losses.registry import loss_defaults, loss_domains

    aliases = aliases or {}
    defaults, domains = loss_defaults(loss), loss_domains(loss)
    for name in (*aliases, *pairs):
        if name not in defaults:
            raise ValueError(
                f"loss {loss!r} does not take {spelled(name, aliases)}; it takes: {takes(defaults)}"
            )
    loose = loss.startswith("pml:")
    params = {
        name: read(name, text, defaults[name], domains.get(name), loose)
        for name, text in pairs.items()
    }
    for name, value in aliases.items():
        if params.get(name, value) != value:
            raise ValueError(
                f"{spelled(name, aliases)} {value} and --loss-param {name}={pairs[name]} "
                "disagree; give one of them"
            )
        params[name] = value
        check_alias(name, value, domains.get(name), aliases)
    check_built(loss, params)  # its own checks first: they say more (NNGK needs sigma > 0)
    for name in pairs.keys() & RANGES.keys():  # the bounds its short spelling has
        if isinstance(params[name], (int, float)) and not isinstance(params[name], bool):
            check_range(name, pairs[name], RANGES[name])
    return params


def check_built(loss: str, params: dict[str, Any]) -> None:
    """The loss built once with `params` (on a stand-in training set: its own checks of their
    values, e.g. NNGK's sigma > 0), and its miner known."""
    from losses import build_loss
    from miners import get_miner_class

    if params.get("miner") is not None:
        get_miner_class(params["miner"])
    logging.disable(logging.WARNING)  # e.g. NNGK's k cut to the stand-in's size
    try:
        build_loss(loss, params, num_train=1000, num_classes=10, dims=8)
    except (TypeError, ValueError, AssertionError, ArithmeticError) as err:  # PML asserts some
        raise ValueError(f"loss {loss!r} with {params}: {first_line(err)}") from None
    finally:
        logging.disable(logging.NOTSET)


def params_for_each(losses: list[str], pairs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each loss's share of the --loss-param pairs (`suite`, `tune`): a parameter applies to
    every loss that takes it; one that none of them takes is a ValueError."""
    plan = [(loss, {}) for loss in dict.fromkeys(losses)]
    found = shared_params(plan, pairs)
    return {loss: params for (loss, _), params in zip(plan, found, strict=True)}


def planned_params(
    plan: list[tuple[str, dict]], pairs: dict[str, str], aliases: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The parameters of each planned (loss, its set's parameters): for one loss, every
    parameter given is its own (`loss_params`); for several, a parameter applies to each
    loss that takes it. A ValueError for one that the plan's set gives itself (the triplet
    miners of `paper`) or that no loss of the plan takes."""
    aliases = aliases or {}
    if len(plan) == 1:
        loss, own = plan[0]
        return [{**own, **loss_params(loss, pairs, aliases)}]
    for name in (*aliases, *pairs):
        if any(name in own for _, own in plan):
            raise ValueError(
                f"{spelled(name, aliases)}: the set of losses sets it itself (each triplet "
                "miner); name the losses instead, e.g. --loss triplet,nngk"
            )
    return shared_params(plan, pairs, aliases)


def shared_params(
    plan: list[tuple[str, dict]], pairs: dict[str, str], aliases: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Each planned loss's own parameters and its share of those given: the ones it takes."""
    from losses import loss_defaults

    aliases = aliases or {}
    accepted = [loss_defaults(loss) for loss, _ in plan]
    unused = [name for name in (*aliases, *pairs) if not any(name in a for a in accepted)]
    if unused:
        losses = ", ".join(dict.fromkeys(loss for loss, _ in plan))
        raise ValueError(f"no loss of {losses} takes {spelled(unused[0], aliases)}")
    return [
        {
            **own,
            **loss_params(
                loss,
                {n: v for n, v in pairs.items() if n in taken},
                {n: v for n, v in aliases.items() if n in taken},
            ),
        }
        for (loss, own), taken in zip(plan, accepted, strict=True)
    ]
