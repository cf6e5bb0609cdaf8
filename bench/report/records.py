"""What makes a finished run's record unusable to the report: a line naming it, so that the
run is left out and named rather than read wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.evaluation.metrics import REQUIRED_KEYS, retrieval_keys
from bench.protocols import protocol_columns
from bench.report.fields import FROM_CONFIG, field_fault
from bench.runs import store
from bench.util.errors import first_line

# Earlier versions' NMI and the protocols' own metrics, checked to be numbers where a run has
# them.
OPTIONAL_METRICS = ("nmi_best_of_5", *protocol_columns())


IDENTITY = ("dataset", "protocol", "loss", "dims", "seed")  # what names a run's table and row


def config_fault(run_dir: Path, metrics: dict) -> str:
    """What makes a finished run's config.json unusable ('' where nothing): every version
    wrote one, and the settings metrics.json lacks come from it, so a run without it would
    take the defaults' settings (another row) without a word; those settings are checked as
    metrics.json's are (`bench.report.fields`)."""
    path = Path(run_dir) / store.CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return f"has no {store.CONFIG}, where its settings are"
    except (OSError, ValueError) as err:
        return f"{store.CONFIG} is unreadable ({type(err).__name__}: {first_line(err)})"
    if not isinstance(config, dict):
        return f"{store.CONFIG} is not a JSON object"
    # a run is filed by metrics.json's identity: one its config.json contradicts is not sure
    clash = [k for k in IDENTITY if k in config and k in metrics and config[k] != metrics[k]]
    if clash:
        k = clash[0]
        return (
            f"{store.CONFIG} and {store.METRICS} disagree on its {k} ({config[k]!r} and "
            f"{metrics[k]!r}): one was edited or replaced"
        )
    read = {k: v for k, v in config.items() if k not in metrics}  # metrics.json's first
    fault = field_fault(read, FROM_CONFIG)
    return f"{store.CONFIG} {fault}" if fault else ""


def metrics_fault(metrics: dict) -> str:
    """What makes a metrics.json unusable ('' where nothing): a missing key, a metric that is
    not a number or not between 0 and 1 (NaN passes: a metric that could not be computed), a
    field the report reads that holds what it does not allow (`bench.report.fields`: a size
    of 0, an empty loss, epochs -3)."""
    required = (*REQUIRED_KEYS, "dataset", "loss", "dims", "seed")
    missing = [k for k in required if k not in metrics]
    if missing:
        return f"lacks {', '.join(missing)}"
    numbers = [*retrieval_keys(metrics), *(k for k in OPTIONAL_METRICS if k in metrics)]
    bad = [k for k in numbers if not is_number(metrics[k])]
    if bad:
        return f"has {', '.join(f'{k} = {metrics[k]!r}' for k in bad)}, not a number"
    # Every one of them is a share: recall, NMI, MAP@R, accuracy, FAR, FRR, AP, mprec.
    shares = [k for k in numbers if metrics[k] is not None and not np.isnan(metrics[k])]
    bad = [k for k in shares if not 0 <= metrics[k] <= 1]
    if bad:
        return f"has {', '.join(f'{k} = {metrics[k]!r}' for k in bad)}, outside 0 to 1"
    fault = field_fault(metrics)
    if fault:
        return fault
    init = metrics.get("untrained_network")
    return untrained_fault({} if init is None else init)


def untrained_fault(init: object) -> str:
    """What makes a run's record of its untrained network unusable ('' where nothing): the
    MAP@R at init that the table shows, read as `metrics_fault` reads the run's own."""
    if not isinstance(init, dict):
        return f"has untrained_network = {init!r}, not a record of metrics"
    bad = [k for k in retrieval_keys(init) if k in init and not is_number(init[k])]
    if bad:
        return f"has {', '.join(f'untrained_network.{k} = {init[k]!r}' for k in bad)}, not a number"
    return ""


def is_number(value: object) -> bool:
    """A metric's value: a number, or null where it could not be computed (NaN)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
