"""The run settings on the command line: one option per RunConfig field (`--batch-size` for
`batch_size`), of the field's type and with the field's help, so that a field added to RunConfig
is an option of `run`. Fields marked `option=False` are not (the commands set them otherwise).
An option not given is None, so that the preset decides (bench/train/presets.py make_configs),
except where no preset sets the field (`SETTINGS`' show_default): the field's default."""

from __future__ import annotations

from dataclasses import Field, fields
from typing import Any, Callable, get_type_hints

import click
from click.core import ParameterSource

from bench.cli.options import NON_NEGATIVE, POSITIVE, POSITIVE_FLOAT, FiniteFloat
from bench.data.crop_area import parse_crop_scale
from bench.data.names import resizes_images
from bench.data.splits import PROTOCOLS, check_val_split_name
from bench.models.choices import BACKBONES, EMBEDDINGS, POOLINGS, check_backbone, is_timm
from bench.runs.config import RunConfig, canonical_preset
from bench.train.choices import OPTIMIZER_NAMES, PRECISIONS, PRESET_NAMES, parse_schedule
from bench.train.tracking import LOG_KINDS, require


class PresetChoice(click.Choice):
    """A paper preset's name; an earlier name of it (`seed003`) is read as today's."""

    def __init__(self) -> None:
        super().__init__(PRESET_NAMES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(canonical_preset(value), param, ctx)


class ValSplitChoice(click.ParamType):
    """images, classes, or classes:F/K (the F-th of K class folds, as `tune --folds K` holds
    them out: the shipped default trained under a tuned study's protocol)."""

    name = "val_split"

    def get_metavar(self, *args: Any, **kwargs: Any) -> str:
        return "[images|classes|classes:F/K]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            check_val_split_name(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        return value


class CheckedText(click.ParamType):
    """Text in a form of its own (--schedule, --crop-scale), checked by `check` (a one-line
    ValueError naming the form) before anything is loaded."""

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


def check_log(ctx: click.Context, param: click.Parameter, kind: str | None) -> str | None:
    """--log's package present, before anything is written; else a one-line error naming the
    install."""
    try:
        require(kind or "none")
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    return kind


def check_backbone_name(ctx: click.Context, param: click.Parameter, name: str | None):
    """--backbone a known one; else a one-line error listing them."""
    try:
        if name is not None:
            check_backbone(name)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    return name


# The values a setting may take beyond its field's type: click's keyword arguments, and
# "choices" named in the help of a free-text option; show_default: no preset sets it, so its
# default is the field's (the others' is None: the preset's). The choices come from modules
# without torch.
SETTINGS: dict[str, dict[str, Any]] = {
    "protocol": dict(type=click.Choice(PROTOCOLS), show_default=True),
    "backbone": dict(choices=(*BACKBONES, "timm:NAME"), callback=check_backbone_name),
    "embedding": dict(type=click.Choice(EMBEDDINGS)),
    "pooling": dict(type=click.Choice(POOLINGS)),
    "epochs": dict(type=POSITIVE),
    "warmup_epochs": dict(type=click.IntRange(min=0)),
    "batch_size": dict(type=click.IntRange(min=2)),
    "m_per_class": dict(type=POSITIVE),
    "lr": dict(type=NON_NEGATIVE),
    "embedding_lr": dict(type=POSITIVE_FLOAT),
    "schedule": dict(type=CheckedText("[none|cosine|step:E1,E2,...:F]", parse_schedule)),
    "momentum": dict(type=FiniteFloat(min=0, max=1)),
    "memory": dict(type=click.IntRange(min=0), show_default=True),
    "optimizer": dict(type=click.Choice(OPTIMIZER_NAMES)),
    "weight_decay": dict(type=NON_NEGATIVE),
    "val_fraction": dict(type=FiniteFloat(min=0, max=1, max_open=True)),
    "val_split": dict(type=ValSplitChoice()),
    "train_per_class": dict(type=POSITIVE),
    # bench.evaluation.metrics.CLUSTERING's keys (that module imports faiss)
    "clustering": dict(type=click.Choice(("full", "pml", "none")), show_default=True),
    "precision": dict(type=click.Choice(PRECISIONS), show_default=True),
    "resize": dict(type=POSITIVE),
    "crop": dict(type=POSITIVE),
    "pad": dict(type=click.IntRange(min=0)),
    "crop_mode": dict(type=click.Choice(("squash", "aspect"))),  # bench.data.crops.CROP_MODES
    "crop_scale": dict(type=CheckedText("LOW,HIGH", parse_crop_scale)),
    "preset": dict(type=PresetChoice()),
    "workers": dict(type=click.IntRange(min=0), show_default=True),
    "log": dict(type=click.Choice(LOG_KINDS), show_default=True, callback=check_log),
}


def run_settings() -> dict[str, Field]:
    """RunConfig's fields that are options, by name."""
    return {f.name: f for f in fields(RunConfig) if f.metadata.get("option", True)}


def setting_option(name: str) -> Callable:
    """The option of the run setting `name`."""
    setting = run_settings()[name]
    extra = dict(SETTINGS.get(name, {}))
    text = setting.metadata["help"]
    if "choices" in extra:
        text += f" One of {', '.join(extra.pop('choices'))}."
    default = setting.default if extra.get("show_default") else None
    flag = "--" + name.replace("_", "-")
    kind = get_type_hints(RunConfig)[name]
    if kind is bool:  # --no-NAME: off where a preset sets it (--no-freeze-bn)
        flags = f"{flag}/--no-{flag[2:]}"
        return click.option(flags, name, default=default, help=text, **extra)
    return click.option(flag, type=extra.pop("type", kind), default=default, help=text, **extra)


def setting_options(*names: str) -> Callable:
    """A decorator adding the options of the run settings `names` (none named: all)."""

    def add(command: Callable) -> Callable:
        for name in reversed(names or tuple(run_settings())):
            command = setting_option(name)(command)
        return command

    return add


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

    try:
        sizes = input_settings(backbone, settings.get("resize"), settings["crop"])
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if dataset and not resizes_images(dataset):
        sizes["resize"] = settings.get("resize")
    return {**settings, **sizes}


LOG = setting_option("log")
