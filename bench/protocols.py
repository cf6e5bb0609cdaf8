"""The protocols by name, each a class of declarations that the harness reads in place of
comparing protocol names (as a loss declares what it needs).

It sits below every floor that consults it (data, evaluation, train, report, classic), so it
declares names and data only; each floor keeps its implementation under the declared name: a
split in `bench.data.splits.SPLITTERS`, an evaluation in `bench.train.evaluations`, a preset in
`bench.train.presets.PROTOCOL_PRESETS`. The names are in every run's config.json and run id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from bench.util.registry import Registry

PROTOCOLS = Registry("protocol")
register_protocol = PROTOCOLS.register
get_protocol = PROTOCOLS.get_class

DEFAULT_PROTOCOL = "metric"
# The Recall@K of a data set that declares none of its own (`bench.data.recall_ks`): CUB-200-2011
# and Cars196's, as Oh Song et al. 2016 and Meyer et al. 2018 (Tables 1-2) report them.
DEFAULT_RECALL_KS = (1, 2, 4, 8)
# What validation and test add to retrieval (bench.train.evaluations implements them):
CLASSIFIER = "classifier"  # accuracy and NLL of the loss's classifier over the training classes
VERIFICATION = "verification"  # pair verification at the threshold chosen on validation


class Protocol:
    """What a protocol declares; nothing outside this module compares a protocol's name.

    Data (bench/data):
    - `split`: how a data set's images are split (`bench.data.splits.SPLITTERS`);
    - `class_validation`: `--val-split classes` may hold out whole training classes;
    - `published_validation`: it validates on a data set's published validation split where
      the data set has one (`--val-fraction` then does not apply);
    - `field_images_only`, `crop_to_boxes`: a data set's field images only (Leafsnap), cropped
      to their bounding boxes where the data set has them.
    Training (bench/train):
    - `score`, `lower_is_better`: the validation metric that selects the checkpoint;
    - `evaluations`: what validation and test add to retrieval (CLASSIFIER, VERIFICATION);
    - `gallery`: its test searches each query in a separate gallery (the test split flags its
      queries, `bench.data.datasets.query_flags`), not every item among the others;
    - `held_out_styles`: its queries are drawn in styles held out of training (a data set that
      names its images' styles: the emoji sets, `emoji:held_out=...`);
    - `preset`: the preset of its image data sets (`bench.train.presets.PROTOCOL_PRESETS`).
    Checks (bench/train/preflight.py); a text is what its error says, '' where it does not apply:
    - `needs_validation`: why --val-fraction 0 cannot do;
    - `trained_classes`: why every validation and test class needs training images;
    - `validation_ranks`: its score compares items of a class, so validation needs a class of
      two items;
    - `classes_note`: where its classes go, for the errors about too few.
    Report and names:
    - `columns`: its own metrics (metrics.json keys) and their column headers;
    - `named`: its name shows in run ids, table names and experiment names (not inherited: a
      protocol derived from the metric protocol is named all the same);
    - `trains`: a network is trained under it (a `run --protocol` choice);
    - `follows`: the record key that names the protocol whose split its runs follow;
    - `same_as`: the protocol whose tables and data its runs share;
    - `retrieval_note`: what its tables' R@K, NMI and MAP@R are of, where not the test classes.
    """

    registry_name: ClassVar[str]
    split: ClassVar[str] = ""
    class_validation: ClassVar[bool] = False
    published_validation: ClassVar[bool] = False
    field_images_only: ClassVar[bool] = False
    crop_to_boxes: ClassVar[bool] = False
    score: ClassVar[str] = "map@r"
    lower_is_better: ClassVar[bool] = False
    evaluations: ClassVar[tuple[str, ...]] = ()
    gallery: ClassVar[bool] = False
    held_out_styles: ClassVar[bool] = False
    preset: ClassVar[str] = DEFAULT_PROTOCOL
    needs_validation: ClassVar[str] = ""
    trained_classes: ClassVar[str] = ""
    validation_ranks: ClassVar[bool] = True
    classes_note: ClassVar[str] = ""
    columns: ClassVar[dict[str, str]] = {}
    named: ClassVar[bool] = True
    trains: ClassVar[bool] = True
    follows: ClassVar[str] = ""
    same_as: ClassVar[str] = ""
    retrieval_note: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls.named = cls.__dict__.get("named", True)

    @classmethod
    def score_of(cls, metrics: Mapping[str, float]) -> float:
        """The validation score (higher is better) of an epoch's validation metrics."""
        value = metrics[cls.score]
        return -value if cls.lower_is_better else value

    @classmethod
    def evaluates(cls, evaluation: str) -> bool:
        return evaluation in cls.evaluations


# Registered in the order of the report's columns.
@register_protocol("metric")
class Metric(Protocol):
    """Train on the first half of the classes, test on the rest (Meyer et al. 2018, §3.1);
    validation by MAP@R (Musgrave et al. 2020)."""

    split = "metric"
    class_validation = True  # its test classes are never trained on; its validation may not be
    classes_note = "trains on the first half of the classes, tests on the rest"
    named = False


@register_protocol("classify")
class Classify(Protocol):
    """The same classes everywhere, scored by the loss's classifier (Meyer et al. 2018, §3.2);
    validation by the classifier's NLL."""

    split = "classify"
    published_validation = True
    field_images_only = True
    crop_to_boxes = True
    score = "nll"
    lower_is_better = True
    evaluations = (CLASSIFIER,)
    preset = "classify"
    trained_classes = "scores its classifier on the classes it trained on"
    validation_ranks = False
    columns = {"accuracy": "Accuracy"}


@register_protocol("linear")
class Linear(Protocol):
    """The linear methods of Sharma et al. 2015 (`nngk-bench linear`): fitted on the feature
    vectors of a data protocol (`data_protocols` on digits, a features file's own split), no
    network trained; their runs sit beside that protocol's."""

    trains = False
    follows = "data_protocol"
    data_protocols: ClassVar[tuple[str, ...]] = ("metric", "classify")
    columns = {f"mprec@{k}": f"mprec@{k}" for k in (1, 10, 50)}  # bench.evaluation.retrieval


@register_protocol("file")
class FeatureFile(Protocol):
    """A linear method's data protocol on a features file, which carries its own split: its
    runs share the metric protocol's tables, as deep runs on such a file have that protocol."""

    trains = False
    named = False
    same_as = "metric"


@register_protocol("pairs")
class Pairs(Protocol):
    """Seen and unseen pair verification (the Tiny ImageNet pair-verification report):
    validation by pair accuracy at the threshold chosen on the validation pairs."""

    split = "pairs"
    score = "pair_accuracy"
    evaluations = (VERIFICATION,)
    preset = "pairs"
    needs_validation = "chooses its verification threshold on validation images"
    classes_note = "trains and tests on the first half of the classes"
    retrieval_note = (
        "R@K, NMI and MAP@R here are of the seen classes' test images (the classes the runs "
        "trained on); the unseen classes enter the pair metrics (unseen acc., FAR, FRR, AP) alone."
    )
    columns = {
        f"{part}_{m}": f"{part} {label}"
        for part in ("seen", "unseen")
        for m, label in (("accuracy", "acc."), ("far", "FAR"), ("frr", "FRR"), ("ap", "AP"))
    }


@register_protocol("query-gallery")
class QueryGallery(Protocol):
    """In-Shop's protocol (Liu et al. 2016): train on the published training items, then search
    each query image among the gallery images of the other items, never among the other
    queries (R@K and MAP@R of the queries; NMI over the gallery); validation by MAP@R over
    held-out training classes, as the metric protocol's."""

    split = "query-gallery"
    class_validation = True  # its test items are never trained on; its validation may not be
    gallery = True
    preset = "query-gallery"
    classes_note = "trains on the published training items and tests on the query and gallery items"


@register_protocol("cross-style")
class CrossStyle(Protocol):
    """Queries in styles never trained on, in In-Shop's query and gallery form: the first half
    of the classes train on the images of every set but the held-out ones (which the training
    classes never show); each held-out set's image of a test class is a query, searched among
    the other sets' images of the test classes (the gallery); validation by MAP@R as the metric
    protocol's, within the sets trained on."""

    split = "cross-style"
    class_validation = True
    gallery = True
    held_out_styles = True
    classes_note = (
        "trains on the first half of the classes without the held-out sets, and queries the "
        "held-out sets' images of the rest in the other sets' images"
    )


def trained_protocols() -> tuple[str, ...]:
    """The protocols a network is trained under, in the order registered."""
    return tuple(name for name, protocol in PROTOCOLS.items() if protocol.trains)


def evaluating(evaluation: str) -> list[str]:
    """The protocols whose validation and test add `evaluation`."""
    return [name for name, protocol in PROTOCOLS.items() if protocol.evaluates(evaluation)]


def protocol_columns() -> dict[str, str]:
    """Every protocol's own metrics and their column headers, in the order registered."""
    return {key: label for p in PROTOCOLS.values() for key, label in p.columns.items()}


def shown_protocol(name: str) -> bool:
    """Whether a protocol's name shows in run ids, table names and experiment names (the
    default protocol's does not, nor a features file's split); an unknown name shows."""
    return name not in PROTOCOLS or PROTOCOLS[name].named


def data_protocol(record: Mapping[str, Any]) -> str:
    """The protocol whose split of the data a run follows, from its metrics.json or config.json:
    its own; a linear method's data protocol; a features file's split as the metric protocol.
    An unknown name is taken as it is (a report reads runs of any version)."""
    name = record.get("protocol") or DEFAULT_PROTOCOL
    follows = PROTOCOLS[name].follows if name in PROTOCOLS else ""
    name = (record.get(follows) if follows else None) or name
    return (PROTOCOLS[name].same_as if name in PROTOCOLS else "") or name
