"""The run settings on the command line: one option per RunConfig field (`--batch-size` for
`batch_size`), of the field's type and with the field's help, so that a field added to RunConfig
is an option of `run`. Fields marked `option=False` are not (the commands set them otherwise).
An option not given is None, so that the preset decides (bench/train/presets.py make_configs),
except where no preset sets the field (`DEFAULT_SHOWN`): the field's default."""

from __future__ import annotations

from dataclasses import Field, asdict, fields
from typing import Any, Callable

import click
from click.core import ParameterSource

from bench.cli.options import FiniteFloat, click_errors, stacked
from bench.data.crop_area import parse_crop_scale
from bench.data.names import resizes_images
from bench.data.splits import PROTOCOLS, check_val_split_name
from bench.models.choices import BACKBONES, EMBEDDINGS, POOLINGS, check_backbone, is_timm
from bench.runs.config import RunConfig, canonical_preset, declared_values
from bench.runs.values import OneOf
from bench.train.choices import OPTIMIZER_NAMES, PRECISIONS, PRESET_NAMES, parse_schedule
from bench.train.tracking import LOG_KINDS, require


class PresetChoice(click.Choice):
    """A paper preset's name; an earlier name of it (`seed003`) is read as today's."""

    def __init__(self) -> None:
        super().__init__(PRESET_NAMES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(canonical_preset(value), param, ctx)


class CheckedText(click.ParamType):
    """Text in a form of its own (--schedule, --crop-scale, --val-split), checked by `check` (a
    one-line ValueError naming the form) before anything is loaded."""

    def __init__(self, metavar: str, check: Callable[[str], Any]) -> None:
        self.name, self.metavar, self.check = metavar, metavar, check

    def get_metavar(self, *args: Any, **kwargs: Any) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            self.check(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        return str(value)


def checked_by(check: Callable[[str], None]) -> Callable:
    """A callback running `check` on the option's value where it has one, its ValueError one
    line: --backbone a known one, --log's package present before anything is written."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        with click_errors():
            if value is not None:
                check(value)
        return value

    return callback


# What a setting's field cannot say (bench.runs cannot import these packages, nor they it): the
# choices its package lists or the check it makes, as click's keyword arguments, and "choices"
# named in the help of a free-text option. The packages are those without torch.
SETTINGS: dict[str, dict[str, Any]] = {
    "protocol": dict(type=click.Choice(PROTOCOLS)),
    "backbone": dict(choices=(*BACKBONES, "timm:NAME"), callback=checked_by(check_backbone)),
    "embedding": dict(type=click.Choice(EMBEDDINGS)),
    "pooling": dict(type=click.Choice(POOLINGS)),
    "schedule": dict(type=CheckedText("[none|cosine|step:E1,E2,...:F]", parse_schedule)),
    "optimizer": dict(type=click.Choice(OPTIMIZER_NAMES)),
    "val_split": dict(type=CheckedText("[images|classes|classes:F/K]", check_val_split_name)),
    "precision": dict(type=click.Choice(PRECISIONS)),
    "crop_scale": dict(type=CheckedText("LOW,HIGH", parse_crop_scale)),
    "preset": dict(type=PresetChoice()),
    "log": dict(type=click.Choice(LOG_KINDS), callback=checked_by(require)),
}
# The settings no preset sets: their default is the field's, shown (the others' is None: the
# preset's).
DEFAULT_SHOWN = ("protocol", "memory", "clustering", "precision", "workers", "log")


def run_settings() -> dict[str, Field]:
    """RunConfig's fields that are options, by name."""
    return {f.name: f for f in fields(RunConfig) if f.metadata.get("option", True)}


def setting_option(name: str) -> Callable:
    """The option of the run setting `name`."""
    setting, extra = run_settings()[name], dict(SETTINGS.get(name, {}))
    text = setting.metadata["help"]
    if "choices" in extra:
        text += f" One of {', '.join(extra.pop('choices'))}."
    shown = name in DEFAULT_SHOWN
    default = setting.default if shown else None
    flag = "--" + name.replace("_", "-")
    kind = extra.pop("type", declared_type(name))
    if kind is bool:  # --no-NAME: off where a preset sets it (--no-freeze-bn)
        flags = f"{flag}/--no-{flag[2:]}"
        return click.option(flags, name, default=default, help=text, **extra)
    return click.option(flag, type=kind, default=default, show_default=shown, help=text, **extra)


def declared_type(name: str) -> Any:
    """The type a setting's field declares (int, float, str, bool), as click's type within its
    `Bounds` (a float finite too) or `OneOf` where the field's type is annotated with them."""
    kind, values = declared_values(name)
    if values is None:
        return kind
    if isinstance(values, OneOf):
        return click.Choice(values.words)
    return (click.IntRange if kind is int else FiniteFloat)(**asdict(values))


def setting_options(*names: str) -> Callable:
    """A decorator adding the options of the run settings `names` (none named: all)."""
    return stacked(*(setting_option(name) for name in names or run_settings()))


def settings_from(
    options: dict[str, Any], names: tuple[str, ...] = (), dataset: str = ""
) -> dict[str, Any]:
    """Take the run settings `names` (none named: all) out of a command's keyword arguments:
    {field: value, or None where not given}. A flag not given is None too (older click gives
    False), so that the preset decides, and False where given off (--no-freeze-bn); a timm
    backbone's --resize and --crop, where not given, are its own (`backbone_input`)."""
    settings = {name: options.pop(name) for name in names or tuple(run_settings())}
    return backbone_input(
        {
            name: None if value is False and not given(name) else value
            for name, value in settings.items()
        },
        dataset,
    )


def given(name: str) -> bool:
    """Whether the current command's option `name` was given (on the command line or in its
    environment variable), not left at its default."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def backbone_input(settings: dict[str, Any], dataset: str = "") -> dict[str, Any]:
    """The settings with a timm backbone's input size (from its pretrained configuration) as
    --crop and --resize where they are not given, in place of the preset's (no --resize for a
    `dataset` whose images are never resized: it would name the run and change nothing); a
    one-line error where timm is not installed or has no such model."""
    backbone = settings.get("backbone")
    if not backbone or not is_timm(backbone) or "crop" not in settings:
        return settings
    from bench.models.timm_backbones import input_settings

    with click_errors():
        sizes = input_settings(backbone, settings.get("resize"), settings["crop"])
    if dataset and not resizes_images(dataset):
        sizes["resize"] = settings.get("resize")
    return {**settings, **sizes}


LOG = setting_option("log")
