"""A run's configuration as a plain dataclass; its hash names the run folder.

Each field carries its help text (`metadata["help"]`): `nngk-bench run` offers every field as
an option of the same name (`batch_size` -> `--batch-size`, of the field's type, within the
`Bounds` or `OneOf` its type declares), except those marked `option=False`, which the commands
set otherwise (`--dataset`, `--dims`, `--seed`, `--loss-param`, or from the data)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from bench.protocols import shown_protocol
from bench.runs.values import Bounds, NonNegativeFloat, NonNegativeInt, OneOf, PositiveInt
from bench.util.names import NAME_MAX, fitted_name, safe_name

BASELINE_LOSS = "untrained"  # the loss name of the data set's baseline rows


# Where the data lies, how it is loaded, which preset gave the defaults and where the run is
# logged do not change what a run computes.
NOT_HASHED = ("data_root", "workers", "preset", "log")
# A preset's earlier names, still accepted and read from older runs' records (`seed003` until
# issue 23); presets leave run ids alone (NOT_HASHED), so a renamed one keeps its runs.
PRESET_ALIASES = {"seed003": "liu2019"}


def canonical_preset(name: str) -> str:
    """A preset's name for an earlier name of it; any other name as it is ("" for none)."""
    return PRESET_ALIASES.get(name, name)


# The longest run id: a folder name, with room for the store's ".{id}.forced" beside it. A
# longer one could never be made (no run was ever named so); it is cut and hashed instead.
RUN_ID_ROOM = NAME_MAX - len("..forced")
# Set from the data before a run starts (bench.data.identity), never read from a record.
DATA_IDENTITY = ("data_location", "data_fingerprint")


# --embedding as a row's label names it.
EMBEDDINGS = {"fc": "FC", "gap": "GAP", "backbone": "backbone output"}


def value_text(value: object) -> str:
    """A value as a label shows it: floats shortest ('0.001', '-' for NaN), the rest as str."""
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:g}"
    return str(value)


# What a setting applies to (its `applies`), where not to every run: "images", the image pipeline
# (images resized and cropped: data sets read from files); "crop", that pipeline or a backbone
# built for the crop's size (a timm model, BN-Inception), which takes even a built-in set's images
# at --crop. A run whose data and backbone have neither leaves the setting unused: refused when
# given, at its default in a baseline's id, and in no row's label (`unused_settings`).
def setting(
    default: Any,
    help: str,
    option: bool = True,
    applies: str = "",
    if_set: bool = False,
    held: bool = False,
    recipe: bool = False,
    label: str | Callable[[Any], str] | None = None,
) -> Any:
    """A run setting, declared whole: its default and help; `option=False`: no `run` option
    of its own; `applies`: what it applies to ("images" or "crop", above), "" for every run;
    `if_set`: added after runs were made, so hashed into a run's id only where it differs from
    its default (every earlier run keeps its name, and so its skip and resume); `held`: `tune`
    takes it as given for every trial and retrained run, never searched; `recipe`: one of the
    field's training recipes (issue 45), stated in a report's setup line where some run set
    it; `label`: how it reads in a row's label where it tells runs apart, a format of the
    value's text ('lr={}') or a function of the value (else the value's text)."""
    what = dict(help=help, option=option, applies=applies, if_set=if_set, held=held)
    metadata = {**what, "recipe": recipe, "label": label}
    if default is dict:  # a mutable default: each config its own
        return field(default_factory=dict, metadata=metadata)
    return field(default=default, metadata=metadata)


PRESET_DEFAULT = " Default: the preset's."


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run; its hash names the run folder."""

    dataset: str = setting("digits", "The data set (run --dataset).", option=False)
    protocol: str = setting(
        "metric",
        "metric: test on classes never trained on; classify: the same classes in every split "
        "(Meyer et al. 2018, §3.2); pairs: seen and unseen classes of the Tiny ImageNet "
        "pair-verification report; query-gallery: In-Shop's queries searched in its gallery "
        "(Liu et al. 2016); cross-style: the held-out emoji sets' images searched in the "
        "other sets'.",
    )
    loss: str = setting("nngk", "The loss's name (`nngk-bench losses`).", option=False)
    loss_params: dict[str, Any] = setting(
        dict, "Parameters given to the loss (--loss-param).", option=False
    )
    dims: int = setting(64, "The embedding's size (run --dims).", option=False)
    backbone: str = setting(
        "small_cnn", "The network under the embedding." + PRESET_DEFAULT, held=True
    )
    pretrained: str = setting(
        "none",
        "imagenet, none, or a state-dict PATH (`nngk-bench pretrain` writes one); a timm "
        "backbone's: hub (timm fetches them; imagenet means the same), or a safetensors or "
        "state-dict PATH." + PRESET_DEFAULT,
        held=True,
        label=lambda v: f"{v} weights",
    )
    embedding: str = setting(
        "fc",
        "fc: a linear layer after the backbone; gap: its global average pooling.",
        label=lambda v: EMBEDDINGS.get(v, value_text(v)),
    )
    pooling: str = setting(
        "avg",
        "The backbone's pooling of its last feature map before the embedding: avg, max, or "
        "avg+max (their sum: Kim et al. 2020's GAP + GMP); over the whole map (small_cnn: over "
        "each cell of its 4x4 grid, the whole map with --embedding gap). Default: avg.",
        if_set=True,
        held=True,
        recipe=True,
        label="{} pooling",
    )
    epochs: PositiveInt = setting(20, "Training epochs." + PRESET_DEFAULT, label="{} epochs")
    warmup_epochs: NonNegativeInt = setting(
        0,
        "The first N epochs train only the embedding layer and the loss's own parameters, the "
        "backbone's weights unchanged (Kim et al. 2020's Proxy-Anchor code); 0: none.",
        if_set=True,
        held=True,
        recipe=True,
        label=lambda v: f"warm-up epochs {v}" if v else "no warm-up",
    )
    batch_size: Annotated[int, Bounds(min=2)] = setting(
        64, "Examples per training step." + PRESET_DEFAULT, held=True, label="batch {}"
    )
    m_per_class: PositiveInt = setting(
        16,
        "Examples of each class in a class-balanced batch (default: what the loss declares, "
        "else the preset's).",
        held=True,
        # NaN for random batches, where --m-per-class played no part.
        label=lambda v: "random batches" if v != v else f"{value_text(v)} a class in a batch",
    )
    memory: NonNegativeInt = setting(
        0,
        "Cross-batch memory (Wang et al. 2020): the last N training embeddings join each "
        "batch's pairs and triplets; pair and triplet losses only (`nngk-bench losses`). "
        "At least --batch-size.",
        if_set=True,
        held=True,
        label=lambda v: f"memory {value_text(v)}" if v else "no memory",
    )
    optimizer: str = setting(
        "sgd",
        "sgd (with momentum, as the source papers), adam, adamw (the proxy losses' papers) or "
        "rmsprop (Musgrave et al. 2020).",
        if_set=True,
        held=True,
        label=lambda v: str(v).split(" (")[0],
    )
    lr: NonNegativeFloat = setting(
        0.01, "The network's learning rate." + PRESET_DEFAULT, label="lr={}"
    )
    embedding_lr: Annotated[float, Bounds(min=0, min_open=True)] = setting(
        1.0,
        "The embedding layer's learning rate as a multiple of --lr, in an optimizer group of "
        "its own (Brown et al. 2020's Smooth-AP code: 2). Default: 1.",
        if_set=True,
        held=True,
        label="embedding layer at {}x lr",
    )
    schedule: str = setting(
        "none",
        "The learning rate over the epochs, set once an epoch: none; cosine (annealed to 0 over "
        "the run's epochs); step:E1,E2,...:F (multiplied by F after each epoch listed, e.g. "
        "step:20,40:0.25). Default: none.",
        if_set=True,
        held=True,
        recipe=True,
        label=lambda v: "constant lr" if v == "none" else f"{v} lr schedule",
    )
    momentum: Annotated[float, Bounds(min=0, max=1)] = setting(
        0.9, "Momentum of sgd and rmsprop.", label="momentum {}"
    )
    weight_decay: NonNegativeFloat = setting(
        5e-4, "Weight decay (adamw: decoupled)." + PRESET_DEFAULT, label="weight decay {}"
    )
    val_fraction: Annotated[float, Bounds(min=0, max=1, max_open=True)] = setting(
        0.2,
        "Share of the training images (or classes, --val-split classes) held out to choose "
        "the epoch; 0: train on all of them and test the last epoch, as the papers do.",
        label="validation fraction {}",
    )
    val_split: str = setting(
        "images",
        "Validation: a share of the training images (default), or whole training classes "
        "never trained on (metric protocol); classes:F/K: the F-th of K class folds, as `tune "
        "--folds K` holds them out.",
        if_set=True,
        label="validated on held-out {}",
    )
    train_per_class: PositiveInt = setting(
        0,
        "At most N training images per class (Fig. 3).",
        label=lambda v: f"{int(v)} per class" if v else "all per class",
    )
    clustering: Annotated[str, OneOf(("full", "pml", "none"))] = setting(
        "full",
        "The test's NMI: full: PML's (one k-means, 20 iterations) and the best of 5 restarts "
        "of 50 (nmi_best_of_5), each where it fits about 3 minutes at the test's size, else "
        "left out and said (metrics.json: nmi_left_out); pml: PML's alone at any size (a "
        "seventh of the k-means time); none: no k-means, R@K and MAP@R only, as Musgrave et "
        "al. 2020 report (a cluster per class costs hours at tens of thousands of classes).",
        if_set=True,
        label="clustering {}",
    )
    freeze_backbone: bool = setting(
        False,
        "Train only what follows the backbone.",
        label=lambda v: "frozen backbone" if v else "trained backbone",
    )
    freeze_bn: bool = setting(
        False,
        "The backbone's batch-norm layers keep their running statistics (eval mode while "
        "training) and their scale and shift untrained (Kim et al. 2020's Proxy-Anchor code; "
        "Musgrave et al. 2020). --no-freeze-bn: trained, where a preset freezes them.",
        if_set=True,
        held=True,
        recipe=True,
        label=lambda v: "frozen BN" if v else "BN trained",
    )
    precision: str = setting(
        "fp32",
        "fp32 (the papers'); bf16 or fp16: the network under autocast (channels-last where it "
        "convolves, fp16 with a gradient scaler), the loss in fp32; on a GPU about twice the "
        "images a second for a ResNet-50.",
        if_set=True,
        held=True,
    )
    resize: PositiveInt = setting(
        256,
        "Images' size (the shorter side; the longer at most 4x it) before crops.",
        applies="images",
        held=True,
        label="resize {}",
    )
    crop: PositiveInt = setting(
        224,
        "Random (train) / centre (eval) crop; a timm model's or BN-Inception's input size.",
        applies="crop",
        held=True,
        label="crop {}",
    )
    pad: NonNegativeInt = setting(
        0,
        "Pixels of zeros around an image before its random crop.",
        applies="images",
        label="pad {}",
    )
    crop_mode: Annotated[str, OneOf(("squash", "aspect"))] = setting(
        "squash",
        "squash (the papers'): images stretched to resize x resize, random crops; aspect: "
        "aspect ratio kept, random-resized crops. Default: squash.",
        applies="images",
        if_set=True,
        label="{} crops",
    )
    crop_scale: str = setting(
        "",
        "The random-resized crop's area, LOW,HIGH shares of the image (--crop-mode aspect), e.g. "
        "0.16,1 (Musgrave et al. 2020). Default: torchvision's 0.08,1.",
        applies="images",
        if_set=True,
        held=True,
        recipe=True,
        label=lambda v: f"crop area {v or '0.08,1'}",
    )
    seed: int = setting(0, "The run's seed (run --seed).", option=False)
    preset: str = setting(
        "",
        "A paper's settings in place of the protocol's preset: liu2019 (Liu et al. 2019); "
        "proxy-anchor (Kim et al. 2020's code: BN-Inception, 512-d, GAP + GMP, frozen BN, AdamW, "
        "a warm-up epoch, lr cuts); vit (ViT-S/16 with DINO weights through timm, 384-d, AdamW, "
        "as Ermolov et al. 2022 train it). On digits and glyphs: their own preset with the "
        "paper's embedding size (docs/protocols.md).",
    )
    data_root: str = setting("", "Folder holding the data sets (default: $NNGK_DATA, else ~/data).")
    data_location: str = setting(
        "", "The data's resolved folder or file.", option=False, if_set=True
    )
    data_fingerprint: str = setting(
        "",
        "A digest of the data's files.",
        option=False,
        if_set=True,
        label=lambda v: f"data {v[:8]}" if v else "built-in data",
    )
    tuned: str = setting(
        "", "The Optuna study whose best parameters these are.", option=False, if_set=True
    )
    workers: NonNegativeInt = setting(0, "DataLoader workers.")
    log: str = setting(
        "none",
        "Log hyper-parameters, the training loss at each step and each epoch's metrics to "
        "TensorBoard (RUN/tensorboard/) or MLflow (RESULTS/mlflow.db, or "
        "$MLFLOW_TRACKING_URI); pip install 'nngk-bench[log]'. Does not change the run's id.",
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RunConfig:
        """The config a run recorded (its config.json): other keys ignored, a field it lacks
        at its default (as `HASHED_IF_SET` names older runs), its data's identity left to be
        found again."""
        known = {f.name for f in fields(cls)} - set(DATA_IDENTITY)
        return cls(**{k: v for k, v in record.items() if k in known})

    def run_id(self) -> str:
        unset = {k for k, default in HASHED_IF_SET.items() if getattr(self, k) == default}
        hashed = {k: v for k, v in self.to_dict().items() if k not in {*NOT_HASHED, *unset}}
        digest = hashlib.sha1(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
        miner = self.loss_params.get("miner")
        name = safe_name(f"{self.loss}-{miner}" if miner else self.loss)  # pml:Name -> pml-Name
        protocol = f"{self.protocol}-" if shown_protocol(self.protocol) else ""
        tail = f"{protocol}{name}-d{self.dims}-s{self.seed}-{digest[:8]}"
        return fitted_name(safe_name(self.dataset), tail, RUN_ID_ROOM)


def declared(flag: str) -> tuple[str, ...]:
    """The settings declared with `flag` (if_set, held, recipe), in RunConfig's order."""
    return tuple(f.name for f in fields(RunConfig) if f.metadata.get(flag))


@functools.cache
def _type_hints() -> dict[str, Any]:
    """RunConfig's field types, their `Annotated` extras kept (read once: every option and
    every range of a record asks)."""
    return get_type_hints(RunConfig, include_extras=True)


def declared_values(name: str) -> tuple[type, Bounds | OneOf | None]:
    """The setting's plain type (int, float, str, bool) and what its field's type declares
    beyond it (`Bounds`, `OneOf`: bench/runs/values.py), None where nothing: what `run` takes
    as its option, and what the report accepts of a recorded value."""
    hint = _type_hints()[name]
    if get_origin(hint) is not Annotated:
        return hint, None
    kind, values = get_args(hint)
    return kind, values


# The settings hashed only where set (`setting`'s if_set), with the default they are unset at.
HASHED_IF_SET = {name: getattr(RunConfig(), name) for name in declared("if_set")}


def setting_label(name: str, value: Any) -> str | None:
    """How a setting's value reads in a row's label ('lr=0.001', 'frozen BN'); None for a name
    that is no setting."""
    known = {f.name: f for f in fields(RunConfig)}
    if name not in known:
        return None
    label = known[name].metadata.get("label")
    if callable(label):
        return label(value)
    return (label or "{}").format(value_text(value))


def unused_settings(images: bool, sized_by_crop: bool) -> tuple[str, ...]:
    """The settings a run leaves unused (their `applies`): those of the image pipeline where its
    data is used as it is (`images` False), and the crop too where its backbone is not built for
    the crop's size either."""
    used = {"images": images, "crop": images or sized_by_crop}
    return tuple(f.name for f in fields(RunConfig) if not used.get(f.metadata["applies"], True))


def without_unused(cfg: RunConfig, unused: tuple[str, ...]) -> RunConfig:
    """`cfg` with its `unused` settings at their defaults: an identity that only what changes
    the run names."""
    defaults = RunConfig()
    return replace(cfg, **{name: getattr(defaults, name) for name in unused})
