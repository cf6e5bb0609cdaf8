"""The one line an error is reported by, and the check of a parameter that is not taken (the
losses' and the linear methods' alike)."""

import pytest

from bench.classic.methods import build_method
from bench.util.errors import check_known, first_line
from losses import build_loss


def test_first_line_is_the_messages_first_line_or_the_errors_type():
    assert first_line(ValueError("  one\ntwo ")) == "one"
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_a_parameter_not_taken_names_what_is():
    with pytest.raises(ValueError, match=r"^loss 'x' does not take b, c; it takes: a=1$"):
        check_known("loss", "x", ["c", "a", "b"], {"a": 1})
    check_known("loss", "x", ["a"], {"a": 1})


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: build_loss("nca", {"margin": 1}), "loss 'nca' does not take margin; it takes: "),
        (lambda: build_method("pca", 4, sigma=1), "method 'pca' does not take sigma; it takes: "),
    ],
)
def test_losses_and_methods_say_it_the_same_way(build, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        build()
