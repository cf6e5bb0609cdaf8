"""Helpers of the loss tests' hand-written references (tests/test_loss_*.py).

The references are plain Python loops over examples, pairs or triplets, written from the
papers' formulas (NNGK Eq. 1-3, Song et al. 2016 Eq. 4, ...) and from the exact conventions of
pytorch-metric-learning 2.x where the harness wraps a PML loss (reducers, pair choice,
regulariser). They work on 0-d torch tensors in float64 so that autograd gives reference
gradients; they never call the code under test or PML.
"""

from __future__ import annotations

import torch

F64 = torch.float64


def rows(x: torch.Tensor) -> list[list[torch.Tensor]]:
    """The rows of a (B, d) tensor as lists of 0-d tensors (autograd still reaches x)."""
    return [[x[i, t] for t in range(x.shape[1])] for i in range(x.shape[0])]


def unit_rows(x: torch.Tensor) -> list[list[torch.Tensor]]:
    """Rows divided by their Euclidean norm, element by element."""
    out = []
    for r in rows(x):
        norm = torch.sqrt(sum(v * v for v in r))
        out.append([v / norm for v in r])
    return out


def sq_dist(u, v) -> torch.Tensor:
    return sum((a - b) ** 2 for a, b in zip(u, v, strict=True))


def dist_table(r) -> dict[tuple[int, int], torch.Tensor]:
    """Euclidean distances of all ordered pairs i != j (the diagonal is never needed)."""
    n = len(r)
    return {(i, j): torch.sqrt(sq_dist(r[i], r[j])) for i in range(n) for j in range(n) if i != j}


def val(t) -> float:
    """A plain float of a 0-d tensor (no gradient)."""
    return float(t.detach()) if torch.is_tensor(t) else float(t)


def log_sum_exp(values: list[torch.Tensor]) -> torch.Tensor:
    """log(sum(exp(v))) with the largest value factored out."""
    top = max(val(v) for v in values)
    return top + torch.log(sum(torch.exp(v - top) for v in values))


def mean_nonzero(values: list[torch.Tensor]) -> torch.Tensor:
    """PML's AvgNonZeroReducer: the mean of the strictly positive values, 0 if there are none."""
    kept = [v for v in values if val(v) > 0]
    return sum(kept) / len(kept) if kept else torch.zeros((), dtype=F64)


def grad_of(value: torch.Tensor, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(value, inputs)


def batch(seed: int, labels: list[int], dims: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    x = torch.randn(len(labels), dims, dtype=F64)
    return x, torch.tensor(labels)


def close(a, b, tol=1e-10):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), rtol=tol, atol=tol
    )


def dot(u, v) -> torch.Tensor:
    return sum(a * b for a, b in zip(u, v, strict=True))


def log_one_plus_sum_exp(values: list[torch.Tensor]) -> torch.Tensor:
    """log(1 + sum(exp(v))), 0 for no values."""
    return log_sum_exp([torch.zeros((), dtype=F64), *values])


def cross_entropy(logits: list[torch.Tensor], target: int) -> torch.Tensor:
    """-log softmax(logits)[target]."""
    return log_sum_exp(logits) - logits[target]


def value_and_grads(loss, weights, data, reference, *args, **kwargs) -> torch.Tensor:
    """`loss` on the batch `data` (embeddings, labels), its value and gradients (embeddings,
    `weights`) checked against the reference's, which gets detached copies of the same
    embeddings and weights; the reference's value."""
    x0, y = data
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    gx, gw = grad_of(value, x, weights)
    x_ref = x0.clone().requires_grad_()
    w_ref = weights.detach().clone().requires_grad_()
    ref = reference(x_ref, y, w_ref, *args, **kwargs)
    gx_ref, gw_ref = grad_of(ref, x_ref, w_ref)
    close(value, ref)
    close(gx, gx_ref)
    close(gw, gw_ref)
    return ref


def matches_reference(loss, labels: list[int], reference, seed: int, min_grad: float = 0.0):
    """A built loss without parameters of its own against `reference(x, y)` on `batch(seed,
    labels)`: value and embedding gradient, the reference's value positive and its gradient
    above `min_grad` somewhere (so that neither comparison is trivial)."""
    assert list(loss.parameters()) == []
    x0, y = batch(seed, labels)
    x = x0.clone().requires_grad_()
    value = loss(x, y)
    (g,) = grad_of(value, x)
    x_ref = x0.clone().requires_grad_()
    ref = reference(x_ref, y)
    (g_ref,) = grad_of(ref, x_ref)
    assert val(ref) > 0 and g_ref.abs().max() > min_grad
    close(value, ref)
    close(g, g_ref)
