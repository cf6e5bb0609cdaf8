"""`run --loss` takes a list of losses or a named set on every data set, as `suite` does (issue
42): each loss with its preset's settings, the parameters given shared among the losses that
take them; the names read without torch; and two losses trained on a Cars196-style layout (CUB)
and on a folder, reported as one table, the folder left as it was."""

from __future__ import annotations

import pytest

from bench.cli.loss_sets import PAPER, REALITY_CHECK
from bench.report.write import write_report
from losses import loss_names
from tests.conftest import cli
from tests.fixtures.cub import make_cub
from tests.fixtures.folder import make_folder
from tests.test_options import invoke, one_line_error, plan, planned  # noqa: F401 (a fixture)
from tests.test_report_tables import md_rows

DIGITS = ["run", "--dataset", "digits", "--dims", "8"]
SMALL = ["--backbone", "small_cnn", "--pretrained", "none", "--resize", "20", "--crop", "16"]


def losses_of(configs) -> list[tuple[str, str | None, int]]:
    return [(c.loss, c.loss_params.get("miner"), c.seed) for c in configs]


def test_a_list_plans_each_loss_at_each_seed_at_its_presets_settings(planned):  # noqa: F811
    found = plan(planned, *DIGITS, "--loss", "nngk, contrastive,nngk", "--seed", "0,1")
    assert losses_of(found) == [
        ("nngk", None, 0),
        ("nngk", None, 1),
        ("contrastive", None, 0),
        ("contrastive", None, 1),
    ]
    # Each as it is alone: the same run ids as one `run --loss NAME` each.
    alone = [c.run_id() for c in plan(planned, *DIGITS, "--loss", "nngk", "--seed", "0,1")]
    assert [c.run_id() for c in found[:2]] == alone


def test_a_set_plans_its_losses_with_their_miners(planned):  # noqa: F811
    assert [
        (c.loss, c.loss_params.get("miner")) for c in plan(planned, *DIGITS, "--loss", "paper")
    ] == [(loss, params.get("miner")) for loss, params in PAPER]
    found = plan(planned, *DIGITS, "--loss", "realitycheck,nngk")
    assert [c.loss for c in found] == [loss for loss, _ in REALITY_CHECK] + ["nngk"]
    everything = plan(planned, *DIGITS, "--loss", "all")
    assert {c.loss for c in everything} == set(loss_names())


def test_the_run_of_a_set_is_the_suites_run(planned):  # noqa: F811
    by_run = [c.run_id() for c in plan(planned, *DIGITS, "--loss", "paper", "--seed", "0,1,2")]
    suite = ["suite", "--dataset", "digits", "--dims", "8"]
    assert sorted(by_run) == sorted(c.run_id() for c in plan(planned, *suite))


def test_a_parameter_goes_to_each_loss_that_takes_it(planned):  # noqa: F811
    found = plan(planned, *DIGITS, "--loss", "nngk,contrastive,triplet", "--sigma", "2",
                 "--loss-param", "margin=0.3", "--loss-param", "neg_margin=0.7")  # fmt: skip
    params = {c.loss: c.loss_params for c in found}
    assert params["nngk"]["sigma"] == 2.0 and "margin" not in params["nngk"]
    assert params["contrastive"] == {"neg_margin": 0.7}
    assert params["triplet"]["margin"] == 0.3 and "sigma" not in params["triplet"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--loss", "nngk,contrastive", "--loss-param", "temperature=1"],
         "no loss of nngk, contrastive takes --loss-param temperature"),
        (["--loss", "paper", "--miner", "all"], "--miner: the set of losses sets it itself"),
        (["--loss", "nngk,ngk"], "unknown loss 'ngk' (did you mean nngk?)"),
        (["--loss", ","], "no loss; expected a loss or a set (paper, realitycheck, all)"),
        (["--dataset", "cars"], "unknown data set 'cars' (did you mean cars196?)"),
        (["--loss", "nngk,contrastive", "--triplet-form", "nca"], "--triplet-form nca applies"),
    ],
)  # fmt: skip
def test_a_bad_list_is_a_one_line_error(args, message):
    one_line_error(invoke("run", *args), message)


def test_the_suite_runs_on_any_data_set(planned, tmp_path):  # noqa: F811
    root = make_folder(tmp_path, classes=4, per_class=4)
    args = ["suite", "--dataset", f"folder:{root}", "--losses", "nngk,contrastive", *SMALL]
    found = plan(planned, *args, "--dims", "8")
    assert losses_of(found) == [
        (loss, None, s) for loss in ("nngk", "contrastive") for s in (0, 1, 2)
    ]
    assert {(c.backbone, c.resize, c.crop, c.pretrained) for c in found} == {
        ("small_cnn", 20, 16, "none")
    }


def tree(root) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.mark.parametrize("layout", ["cub", "folder"])
def test_two_losses_train_and_are_reported_as_one_table(tmp_path, monkeypatch, layout):
    # No $NNGK_CACHE: the user's cache folder (here under a home of the test's own) holds the
    # decoded images, not the data folder.
    monkeypatch.delenv("NNGK_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if layout == "cub":
        data = make_cub(tmp_path / "data", classes=4, per_class=6)
        where = ["--dataset", "cub", "--data-root", data]
    else:
        data = make_folder(tmp_path / "data", classes=4, per_class=6)
        where = ["--dataset", f"folder:{data}"]
    before = tree(tmp_path / "data")
    results = tmp_path / "results"
    out = cli("run", "--loss", "nngk,contrastive", *where, *SMALL, "--dims", "8", "--epochs", "1",
              "--batch-size", "8", "--m-per-class", "2", "--results", results)  # fmt: skip
    assert out.exit_code == 0, out.output
    assert tree(tmp_path / "data") == before  # no cache, nothing else, in the user's data
    assert list((tmp_path / "home" / ".cache" / "nngk-bench" / "images").glob("*/images-*.npy"))
    write_report(results, tmp_path / "report")
    pages = [p.read_text() for p in (tmp_path / "report").glob("*.md")]
    (table,) = [text for text in pages if "embedding results on the test split" in text]
    methods = [row[0] for row in md_rows(table)[1:]]
    assert {"nngk", "contrastive"} <= set(methods)
