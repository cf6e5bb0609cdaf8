"""`nngk-bench linear`: Sharma et al. 2015's NML and linear baselines on feature vectors."""

from __future__ import annotations

import click

from bench.cli.options import (
    DEVICE,
    FORCE,
    POSITIVE,
    POSITIVE_FLOAT,
    RESULTS,
    click_errors,
    dims_option,
    seed_option,
)
from bench.protocols import DEFAULT_PROTOCOL, Linear
from bench.runs import store
from bench.util.errors import first_line

SEED002_METHODS = "nml,linear-ml,pca,nca,lmnn,no-projection"


@click.command()
@click.option(
    "--method",
    default=SEED002_METHODS,
    show_default=True,
    help="Comma-separated methods of Sharma et al. 2015.",
)
@click.option("--dataset", default="digits", show_default=True, help="digits or features:PATH.npz.")
@click.option(
    "--protocol",
    type=click.Choice(Linear.data_protocols),
    default=DEFAULT_PROTOCOL,
    show_default=True,
    help="digits' split: metric trains on 0-4 and tests on 5-9; classify (Sharma et al. 2015's own "
    "retrieval protocol) uses every class in every split. A features file has its own split.",
)
@dims_option("Projection sizes (one run each).", default="8,16,32,64")
@seed_option("0")
@click.option("--pairs", type=POSITIVE, default=None, help="nml, linear-ml: training pairs.")
@click.option(
    "--iterations",
    type=POSITIVE,
    default=None,
    help="nml, linear-ml: SGD iterations (pairs visited).",
)
@click.option(
    "--lr",
    type=POSITIVE_FLOAT,
    default=None,
    help="nml, linear-ml: learning rate.",
)
@RESULTS
@FORCE
@DEVICE
def linear(method, dataset, protocol, dims, seeds, pairs, iterations, lr, results, force, device):
    """The NML and linear baselines on feature vectors (Sharma et al. 2015): one run per method,
    size and seed, evaluated with mprec@K (K = 1..50) and the common metrics. The methods fit
    on the CPU; on a GPU (--device) the evaluation and mprec search there."""
    from bench.classic.methods import linear_runs, run_linear_method
    from bench.cli.training import run_compute
    from bench.data.features import load_features
    from bench.train.preflight import check_scorable
    from bench.train.presets import make_configs

    compute = run_compute(device)

    given = {"pairs": pairs, "iterations": iterations, "lr": lr}
    with click_errors(ValueError, FileNotFoundError, line=first_line):
        plan = linear_runs(method.split(","), dims, seeds, given)
        feats = load_features(dataset, protocol=protocol)
        check_scorable(f"the test split of {dataset}", feats.test_labels)
        too_big = [d for name, d, _, _ in plan if name != "no-projection" and d > feats.dims]
        if too_big:
            raise ValueError(f"--dims {max(too_big)} exceeds the {feats.dims} feature dimensions")
        # The untrained baseline row of the report's table: the raw test features.
        from bench.train.baseline import run_baseline
        from bench.train.loaders import with_data_identity

        split = protocol if dataset == "digits" else "metric"
        base = with_data_identity(make_configs(dataset, "untrained", None, {}, protocol=split))
        run_baseline(base[0], results, compute)
        for name, d, s, params in plan:
            run_dir = run_linear_method(
                name, dataset, d, s, params, results, force, protocol, feats,
                compute.search,
            )  # fmt: skip
            metrics = store.read_metrics(run_dir)
            shown = "  ".join(
                f"{k}={metrics[k]:.4f}"
                for k in ("mprec@1", "mprec@10", "map@r")
                if metrics[k] is not None
            )
            click.echo(f"{run_dir}: {shown}")
