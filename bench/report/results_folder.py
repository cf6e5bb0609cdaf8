"""The one check of a results folder that needs no run read: that it is there. Light (no
pandas, no plotting library), so that `report --results TYPO` says so in a second rather than
after their imports (issue 69, item 9)."""

from __future__ import annotations

from pathlib import Path


def missing_results_line(results: Path) -> str:
    """Why a results folder that is not there has nothing to report, and what to do."""
    return (
        f"results folder {results} does not exist; give --results the folder that `run` "
        "or `suite` wrote into (default: results)"
    )


def check_results_exist(results: Path) -> None:
    """A one-line ValueError where `results` is no folder."""
    if not Path(results).is_dir():
        raise ValueError(missing_results_line(results))
