"""`suite --losses`: the named sets (paper, realitycheck, all) and lists of losses; and the
report's rows grouped by loss family, with no family column where a table has one family."""

from __future__ import annotations

import pytest

from bench.cli.suite import SUITE
from bench.report.write import write_report
from losses import loss_family, loss_names
from tests.test_options import one_line_error, plan, planned  # noqa: F401 (a fixture)
from tests.test_report_tables import make_run, md_rows

DIGITS = ["suite", "--dataset", "digits", "--dims", "8", "--seed", "0"]


def planned_losses(planned, *args) -> list[tuple[str, str | None]]:  # noqa: F811
    return [(c.loss, c.loss_params.get("miner")) for c in plan(planned, *DIGITS, *args)]


def test_the_paper_set_is_the_default(planned):  # noqa: F811
    default = plan(planned, *DIGITS)
    paper = plan(planned, *DIGITS, "--losses", "paper")
    assert [c.run_id() for c in paper] == [c.run_id() for c in default]
    assert [(c.loss, c.loss_params.get("miner")) for c in default] == [
        (loss, params.get("miner")) for loss, params in SUITE
    ]


def test_the_reality_check_set_is_the_fourteen_losses_of_musgrave_et_al(planned):  # noqa: F811
    found = planned_losses(planned, "--losses", "realitycheck")
    assert len(found) == 14 and len(set(found)) == 14
    assert {loss for loss, _ in found} <= set(loss_names())
    assert {loss_family(loss) for loss, _ in found} >= {"proxy", "pair weighting"}


def test_all_is_every_loss_once_beside_each_triplet_miner(planned):  # noqa: F811
    found = planned_losses(planned, "--losses", "all")
    assert {loss for loss, _ in found} == set(loss_names())
    assert len(found) == len(set(found)) == len(loss_names()) + 2  # triplet: 3 miners
    assert all(pair in [(loss, p.get("miner")) for loss, p in SUITE] for pair in found[:9])


def test_a_list_of_losses_runs_each_at_its_defaults(planned):  # noqa: F811
    assert planned_losses(planned, "--losses", "nca, contrastive,nca") == [
        ("nca", None),
        ("contrastive", None),
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--losses", "paper,nope"], "unknown loss 'nope'; expected a loss (angular, arcface, "),
        (["--losses", "paper,nope"], "or a set (paper, realitycheck, all)"),
        (["--losses", "realitycheck", "--preset", "liu2019"], "--preset liu2019 runs its own"),
    ],
)
def test_a_bad_set_is_a_one_line_error(args, message):
    from tests.test_options import invoke

    one_line_error(invoke(*DIGITS, *args), message)


def test_the_report_ranks_rows_by_map_at_r_and_shows_their_family(tmp_path):
    r = tmp_path / "results"
    make_run(r, "base", loss="untrained", dims=16, **{"map@r": 0.9})
    runs = [("zeta", "ranking", 0.3), ("nngk", "paper", 0.2), ("alpha", "proxy", 0.5)]
    for loss, family, value in runs:
        make_run(r, loss, loss=loss, family=family, dims=16, **{"map@r": value})
    make_run(r, "old", loss="contrastive", dims=16, **{"map@r": 0.4})  # before families
    write_report(r, tmp_path / "out")
    rows = md_rows((tmp_path / "out" / "digits.md").read_text())
    assert rows[0][:3] == ["loss", "family", "dims"]
    # The baseline first, however high; then best first.
    assert [row[:2] for row in rows[1:]] == [
        ["raw inputs", ""],
        ["alpha", "proxy"],
        ["contrastive", "paper"],
        ["zeta", "ranking"],
        ["nngk", "paper"],
    ]


def test_a_table_of_one_family_has_no_family_column(tmp_path):
    r = tmp_path / "results"
    make_run(r, "base", loss="untrained", dims=16)
    make_run(r, "nngk", loss="nngk", family="paper", dims=16)
    write_report(r, tmp_path / "out")
    assert md_rows((tmp_path / "out" / "digits.md").read_text())[0][:2] == ["loss", "dims"]
    assert "family" not in (tmp_path / "out" / "digits.csv").read_text().splitlines()[0]
