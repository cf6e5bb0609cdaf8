"""Where a curated loss's defaults come from (issue 67): a parameter it leaves at its PML
class's default is sourced with the value read from that class, so no loss file restates
PML's value (which a PML release could change under it); a source of its own wins."""

from __future__ import annotations

import inspect

from pytorch_metric_learning.losses import NTXentLoss, SignalToNoiseRatioContrastiveLoss

from losses import get_loss_class
from losses.pml_adapter import AdaptedLoss


def pml_default(cls: type, name: str):
    return inspect.signature(cls.__init__).parameters[name].default


def test_a_parameter_at_pmls_default_is_sourced_with_pmls_value():
    class Declared(AdaptedLoss):
        pml_class = NTXentLoss

    assert Declared.sources == {"temperature": "PML's default (0.07)"}
    assert pml_default(NTXentLoss, "temperature") == 0.07
    # Along the bases, where the class passes a parameter on (ContrastiveLoss's margins).
    assert get_loss_class("snr").sources == {
        "pos_margin": "PML's default (0)",
        "neg_margin": "PML's default (1)",
    }
    assert pml_default(SignalToNoiseRatioContrastiveLoss.__mro__[1], "neg_margin") == 1
    assert get_loss_class("fastap").sources == {"num_bins": "PML's default (10)"}  # an integer


def test_a_default_or_a_source_of_its_own_is_not_pmls():
    class Chosen(AdaptedLoss):
        pml_class = NTXentLoss
        defaults = {"temperature": 0.5}
        sources = {"temperature": "chosen here"}

    assert Chosen.sources == {"temperature": "chosen here"}
    # Its default 0.5 with its source, not PML's 1; its pos_margin at PML's 0 keeps its own.
    contrastive = get_loss_class("contrastive").sources
    assert contrastive["neg_margin"].startswith("chosen here")
    assert contrastive["pos_margin"] == "PML's default (0)"

    # A default of its own with no source is not given PML's (the listing test then fails).
    class Unsourced(AdaptedLoss):
        pml_class = NTXentLoss
        defaults = {"temperature": 0.5}

    assert Unsourced.sources == {}
