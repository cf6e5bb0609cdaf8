"""The named paper presets (`run --preset`, `suite --preset`), without what builds them: the
command line's options read the names here, so that `--help` imports no heavy package;
`bench.train.presets.PRESETS` holds a preset of each name."""

from __future__ import annotations

PRESET_NAMES = ("seed003",)
