"""`--precision fp32|bf16|fp16` (issue 44): autocast for the network, channels-last where it
convolves, the loss in fp32, a gradient scaler for fp16; recorded, hashed only when not fp32,
passed on by suite and tune, and named in the report. Run here on the CPU (bf16 autocast)."""

import json

import pytest
import torch

from bench.runs.config import RunConfig
from bench.train.checkpoint import checkpoint_bytes, load_checkpoint
from bench.train.precision import Precision
from tests.conftest import cli

DATA = "glyphs:classes=16,instances=10,size=12"
RUN = ["run", "--loss", "nngk", "--dataset", DATA, "--dims", "8", "--epochs", "2"]


def test_fp32_keeps_every_run_id_and_the_others_name_their_own():
    assert RunConfig(precision="fp32").run_id() == RunConfig().run_id()
    ids = {RunConfig(precision=p).run_id() for p in ("fp32", "bf16", "fp16")}
    assert len(ids) == 3


def conv_net() -> torch.nn.Module:
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 8))


def test_reduced_precision_autocasts_the_network_in_channels_last():
    x = torch.randn(2, 3, 8, 8)
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        precision, net = Precision(name, torch.device("cpu")), conv_net()
        precision.prepare(net)
        channels_last = net[0].weight.is_contiguous(memory_format=torch.channels_last)
        assert channels_last == (name != "fp32")  # fp32 keeps its layout, and its bits
        with precision.autocast():
            assert net(precision.inputs(x)).dtype == dtype
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        Precision("fp8", torch.device("cpu"))


def test_fp16_steps_through_a_scaler_that_skips_overflowed_gradients():
    precision, net = Precision("fp16", torch.device("cpu")), torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    before = net.weight.detach().clone()
    precision.step(net(torch.full((1, 4), float("inf"))).sum(), optimizer)  # inf gradients
    assert torch.equal(net.weight, before) and precision.scaler.get_scale() < 65536.0
    optimizer.zero_grad()
    precision.step(net(torch.ones(1, 4)).sum(), optimizer)
    assert not torch.equal(net.weight, before)


def test_fp16_s_scale_is_kept_through_a_checkpoint(tmp_path):
    precision, net = Precision("fp16", torch.device("cpu")), torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    precision.scaler.scale(torch.ones(()))  # the scale is made at the first use
    precision.scaler.update(1024.0)
    state = checkpoint_bytes(net, net, optimizer, {"epoch": 1}, precision.scaler)
    (tmp_path / "c.pt").write_bytes(state)
    again = Precision("fp16", torch.device("cpu"))
    load_checkpoint(tmp_path / "c.pt", torch.device("cpu"), net, net, optimizer, again.scaler)
    assert again.scaler.get_scale() == 1024.0


def test_a_bf16_run_trains_with_the_loss_in_fp32_and_the_report_names_it(tmp_path, monkeypatch):
    from losses.nngk import NNGKLoss

    dtypes, real = [], NNGKLoss.forward

    def forward(self, embeddings, labels, indices=None):
        dtypes.append(embeddings.dtype)
        return real(self, embeddings, labels, indices)

    monkeypatch.setattr(NNGKLoss, "forward", forward)
    for precision in ("fp32", "bf16"):
        out = cli(*RUN, "--precision", precision, "--results", tmp_path)
        assert out.exit_code == 0, out.output
    assert set(dtypes) == {torch.float32}  # under autocast too
    configs = [json.loads(p.read_text()) for p in tmp_path.glob("*-nngk-*/config.json")]
    assert sorted(c["precision"] for c in configs) == ["bf16", "fp32"]
    metrics = [json.loads(p.read_text()) for p in tmp_path.glob("*-nngk-*/metrics.json")]
    assert all(0 <= m["map@r"] <= 1 for m in metrics)
    # The report's rows and setup line, as its table writes them.
    from bench.report.runs import load_runs, trained_runs
    from bench.report.setup import setup_line

    runs, problems = load_runs(tmp_path)
    assert problems == [] and sorted(trained_runs(runs)["name"]) == ["nngk, bf16", "nngk, fp32"]
    assert "precision bf16 / fp32 (as each row's label says)" in setup_line(runs)


def test_suite_and_tune_pass_the_precision_on(tmp_path, monkeypatch):
    import bench.cli.suite

    planned = []
    monkeypatch.setattr(bench.cli.suite, "submit_runs", lambda runs, *_: planned.extend(runs))
    args = ["suite", "--dataset", DATA, "--seed", "0", "--precision", "bf16"]
    assert cli(*args, "--results", tmp_path).exit_code == 0
    assert planned and {cfg.precision for cfg in planned} == {"bf16"}
    from bench.cli.tune import HELD, held_settings

    assert "precision" in HELD
    assert held_settings({"precision": "bf16"}, DATA, ["nngk"]) == {"precision": "bf16"}
    assert held_settings({"precision": "fp32"}, DATA, ["nngk"]) == {}  # the study's old name
