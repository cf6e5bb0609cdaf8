"""The names of the optimizers and the paper presets (`--optimizer`, `--preset`), without what
builds them: the command line's options read the names here, so that `--help` imports no heavy
package; `bench.train.presets.PRESETS` holds a preset of each name."""

from __future__ import annotations

# The optimizers of `--optimizer` (bench.train.optimizers builds them).
OPTIMIZER_NAMES = ("sgd", "adam", "adamw", "rmsprop")
PRESET_NAMES = ("liu2019",)  # earlier names: bench.runs.config.PRESET_ALIASES
# The precisions of `--precision` (bench.train.precision applies them).
PRECISIONS = ("fp32", "bf16", "fp16")
