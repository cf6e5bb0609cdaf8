"""The pruners' names and the default (`tune --pruner`), without what builds them: the command
line reads them here, so that `--help` imports no heavy package; `bench.tune.pruning.PRUNERS`
holds a pruner of each name."""

from __future__ import annotations

PRUNER_NAMES = ("hyperband", "halving", "median", "none")
PRUNER_DEFAULT = "hyperband"

# A study's name names its folder, and the report's files beside it ("tuning-<name>-...png").
STUDY_NAME_MAX = 200
