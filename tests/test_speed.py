"""The speed benchmarks time equal maths: the per-example loop the NNGK step is quoted against
gives the loss's value and gradients."""

import pytest
import torch

from bench.speed.nngk_step import nngk_case, per_example_nngk_loss, step_times


@pytest.mark.parametrize("dims", [8, 96])
def test_the_per_example_loop_is_the_nngk_loss(dims):
    loss, x, labels, idx = nngk_case(batch=12, dims=dims, bank=300, k=20, device="cpu")
    with torch.no_grad():
        loss.log_weights.normal_(0, 0.5)
    ours = loss(x, labels, idx)
    (gx, gw) = torch.autograd.grad(ours, (x, loss.log_weights))
    bank = (loss.centres, loss.centre_labels, loss.log_weights, loss.sigma)
    loop = per_example_nngk_loss(x, labels, loss.neighbours[idx], *bank)
    (lx, lw) = torch.autograd.grad(loop, (x, loss.log_weights))
    torch.testing.assert_close(ours, loop, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, lx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gw, lw, rtol=1e-4, atol=1e-6)


def test_step_times_cover_the_three_steps():
    times = step_times(batch=8, dims=16, bank=100, k=10, device="cpu")
    assert set(times) == {"nngk", "loop", "softmax"} and all(t > 0 for t in times.values())


def test_the_loader_benchmark_reads_a_data_sets_images(tmp_path):
    from bench.cli.speed import loader_paths
    from tests.fixtures.folder import make_folder

    root = make_folder(tmp_path, classes=3, per_class=4)
    paths = loader_paths(f"folder:{root}", None, 5, tmp_path)
    assert len(paths) == 5 and all(p.startswith(str(root)) for p in paths)
