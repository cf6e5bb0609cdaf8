"""The names of the optimizers and the paper presets (`--optimizer`, `--preset`), without what
builds them: the command line's options read the names here, so that `--help` imports no heavy
package; `bench.train.presets.PRESETS` holds a preset of each name."""

from __future__ import annotations

# The optimizers of `--optimizer` (bench.train.optimizers builds them).
OPTIMIZER_NAMES = ("sgd", "adam", "adamw", "rmsprop")
WITH_MOMENTUM = ("sgd", "rmsprop")  # those that take --momentum
# The paper presets of `--preset`; their earlier names: bench.runs.config.PRESET_ALIASES.
PRESET_NAMES = ("liu2019", "proxy-anchor", "vit")
# The precisions of `--precision` (bench.train.precision applies them).
PRECISIONS = ("fp32", "bf16", "fp16")

# The learning-rate schedules of `--schedule` (bench.train.recipes builds them).
INF = float("inf")
SCHEDULE_FORM = "none, cosine, or step:E1,E2,...:F (e.g. step:20,40:0.25)"


def parse_schedule(text: str) -> tuple[str, tuple[int, ...], float]:
    """'step:20,40:0.25' -> ('step', (20, 40), 0.25); 'cosine' -> ('cosine', (), 1.0); a
    one-line ValueError naming the expected form for anything else."""
    if text in ("none", "cosine"):
        return text, (), 1.0
    kind, _, rest = text.partition(":")
    epochs, _, factor = rest.partition(":")
    try:
        milestones, gamma = tuple(int(e) for e in epochs.split(",")), float(factor)
    except ValueError:
        milestones, gamma = (), 0.0
    rising = list(milestones) == sorted(set(milestones))
    if kind != "step" or not milestones or min(milestones) < 1 or not rising or not 0 < gamma < INF:
        raise ValueError(
            f"bad --schedule {text!r}; expected {SCHEDULE_FORM}: the epochs rising from 1, "
            "the factor a positive number"
        )
    return kind, milestones, gamma
