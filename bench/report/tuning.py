"""The tuning section of the report: what `tune` chose for each loss, with its budget and
Optuna's plots, read from results/tune/<study>/ (best.json, history.png, importance.png)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.table_format import Files, github_table
from bench.runs.weights import current_weights_label

TUNING = "tuning"


def read_studies(results: Path) -> list[dict]:
    found = []
    for path in sorted((Path(results) / "tune").glob("*/best.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "best_params" in record:
            found.append({**record, "folder": path.parent})
    return found


def params_text(params: dict) -> str:
    return ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items())
    )


def tuning_files(results: Path) -> Files:
    """tuning.md and each study's plots; nothing where no study has finished."""
    studies = read_studies(results)
    if not studies:
        return {}
    files: Files = {}
    rows = []
    for study in studies:
        setup = study.get("setup", {})
        budget = budget_text(study)
        plots = []
        for kind in ("history", "importance"):
            png = study["folder"] / f"{kind}.png"
            if png.is_file():
                name = f"{TUNING}-{study['study']}-{kind}.png"
                files[name] = png.read_bytes()
                plots.append(f"[{kind}]({name})")
        rows.append(
            [
                study["loss"],
                setup.get("dataset", ""),
                setup.get("dims", ""),
                budget,
                held_text(study),
                f"{100 * study['best_value']:.2f}",
                params_text(study["best_params"]),
                " ".join(plots),
            ]
        )
    headers = ["loss", "data set", "dims", "budget", "held", "val. MAP@R", "chosen", "plots"]
    files[f"{TUNING}.md"] = (
        "# Tuning: the same search budget for every loss\n\n"
        "Each loss's learning rate, weight decay and own parameters (`nngk-bench losses`), "
        "searched with the same number of trials, epochs per trial and sampler (Sobol), "
        "scored by MAP@R on validation classes never trained on; the test split is never "
        "used. Held: what was given to `tune` for every trial (else the preset's), such as "
        "the weights a network starts from. Where a study was pruned, its first trial is the "
        "loss's default (never pruned), and the budget says the epochs its trials trained "
        "against those they would have trained unpruned. The chosen settings, retrained with "
        "several seeds, are the `-tuned` tables.\n\n" + github_table(rows, headers)
    ).encode()
    return files


def held_text(study: dict) -> str:
    """The settings and loss parameters a study held for every trial ('-': the preset's),
    a weights file by what its provenance says it is, so that a search from scratch and one
    from pretrained weights read apart."""
    settings = study.get("setup", {}).get("settings") or {}
    held = {**(study.get("fixed_params") or {}), **settings}
    if "pretrained" in held:
        held["pretrained"] = current_weights_label(str(held["pretrained"]))
    return params_text(held) or "-"


def budget_text(study: dict) -> str:
    """'8 x 10 epochs, 1 fold(s)', and for a pruned study what its trials trained instead:
    '8 trials (3 pruned by hyperband) of 10 epochs, 1 fold(s): 61 of 80 epochs trained'."""
    setup = study.get("setup", {})
    epochs, folds = setup.get("epochs"), setup.get("folds")
    pruning = study.get("pruning")
    if not isinstance(pruning, dict) or setup.get("pruner", "none") == "none":
        return f"{study['trials']} x {epochs} epochs, {folds} fold(s)"
    return (
        f"{pruning.get('trials')} trials ({pruning.get('pruned')} pruned by {setup['pruner']}) "
        f"of {epochs} epochs, {folds} fold(s): {pruning.get('epochs_trained')} of "
        f"{pruning.get('epochs_unpruned')} epochs trained"
    )
