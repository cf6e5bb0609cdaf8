"""How a run's settings read in its row's label and the setup: 'GAP', 'frozen backbone', 'k=10'."""

from __future__ import annotations

import pandas as pd

from bench.runs.config import setting_label, value_text

UNUSED = "unused"  # a setting the run left unused (bench.report.runs.unused_by): in no label
# How the loss parameters read that read otherwise than NAME=VALUE (the run settings declare
# theirs: RunConfig's `label`).
PARAMS = {"learn_weights": lambda v: "learned weights" if v else "fixed weights"}


def setting_text(column: str, value: object) -> str:
    """How a run's setting reads after its method, e.g. 'GAP', 'frozen backbone', 'k=10' (a
    run setting as RunConfig declares it, `setting_label`); '' for a setting it left unused;
    'no regularizer' for a loss parameter left out (None, or not recorded)."""
    if value is UNUSED or value == UNUSED:
        return ""
    if column.startswith("param_"):
        name = column.removeprefix("param_")
        if name in PARAMS:
            return PARAMS[name](value)
        return f"no {name}" if pd.isna(value) else f"{name}={value_text(value)}"
    text = setting_label(column, value)
    return value_text(value) if text is None else text
