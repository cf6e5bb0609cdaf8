"""Checks of the options a run was given against what it does: an option it would leave unused
(an image option on data used as it is, momentum for Adam), a crop larger than its image, a
schedule's step after the last epoch. Each a one-line ValueError before anything loads."""

from __future__ import annotations

from typing import Any

from bench.data.names import resizes_images
from bench.models.choices import sized_by_crop
from bench.protocols import get_protocol
from bench.runs.config import RunConfig, unused_settings
from bench.train.choices import WITH_MOMENTUM, parse_schedule

OWN_VALIDATION = ("flowers102",)  # classify validates on the published split: no fraction


def unused(cfg: RunConfig) -> tuple[str, ...]:
    """The settings this run leaves unused: the image pipeline's on data used as it is, all
    but the crop where its backbone is built for the crop's size (`unused_settings`)."""
    return unused_settings(resizes_images(cfg.dataset), sized_by_crop(cfg.backbone))


def check_crop(cfg: RunConfig, given: dict[str, Any]) -> None:
    """A one-line ValueError for a crop larger than the resized image it is cut from; each of
    the two named as the option or the preset that set it."""
    if cfg.crop <= cfg.resize or not resizes_images(cfg.dataset):
        return

    def named(option: str) -> str:
        source = f"--{option}" if option in given else f"the preset's {option}"
        return f"{source} {getattr(cfg, option)}"

    raise ValueError(
        f"{named('crop')} exceeds {named('resize')}: a crop is cut from the image resized to "
        f"--resize; give a --crop of at most {cfg.resize} or a --resize of at least {cfg.crop}"
    )


def check_given(cfg: RunConfig, given: dict[str, Any]) -> None:
    """A one-line ValueError for an option given that would change the run's id but not what it
    trains: image options on data used as it is, momentum for Adam, --val-fraction beside a
    class fold."""
    idle = [name for name in unused(cfg) if name in given]
    if idle:
        option = "--" + idle[0].replace("_", "-")
        at_crop = "crop" not in unused(cfg)  # a backbone built for --crop's size
        taken = f"; {cfg.backbone} takes them at --crop alone" if at_crop else ""
        raise ValueError(
            f"{option}: {cfg.dataset}'s inputs are used as they are, never resized or "
            f"cropped{taken}; leave {option} out"
        )
    if "momentum" in given and cfg.optimizer not in WITH_MOMENTUM:
        raise ValueError(
            f"--momentum applies to sgd and rmsprop, not {cfg.optimizer}; leave it out"
        )
    published = get_protocol(cfg.protocol).published_validation
    if "val_fraction" in given and published and cfg.dataset in OWN_VALIDATION:
        raise ValueError(
            f"--val-fraction: {cfg.dataset} has its own validation split, which the "
            f"{cfg.protocol} protocol validates on whatever the fraction; leave it out"
        )
    if "val_fraction" in given and cfg.val_split.startswith("classes:"):
        raise ValueError(
            f"--val-fraction: --val-split {cfg.val_split} holds out a fold of the classes, "
            "whatever the fraction; leave one of them out"
        )


def check_steps_come(cfg: RunConfig) -> None:
    """A one-line ValueError for a step schedule whose last step never comes in the run's
    epochs (`run` and `suite`, where it was given; a tuning trial, shorter than the run its
    settings are for, may end before a step)."""
    if cfg.schedule.startswith("step:"):
        last = max(parse_schedule(cfg.schedule)[1])
        if last >= cfg.epochs:
            raise ValueError(
                f"--schedule {cfg.schedule}: a step after epoch {last} never comes in a run of "
                f"{cfg.epochs} epochs; give steps before the last epoch, or more --epochs"
            )
