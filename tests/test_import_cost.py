"""The main job's two commands (`run` on glyphs with small_cnn, then `report`) import no
torchvision: its import, with torch._dynamo's and sympy's that it brings, cost each of them
1.3 CPU seconds, and neither the built-in sets nor small_cnn use it (docs/speed.md)."""

import json
import subprocess
import sys

# What `run` imports for its runs and `report` for its files, in one fresh interpreter each.
MODULES = {
    "run": (
        "bench.cli.params",
        "bench.cli.training",
        "bench.train.trainer",
        "bench.train.baseline",
    ),
    "report": ("bench.report.write",),
}
UNUSED = ("torchvision", "torch._dynamo", "sympy")


def imported(modules: tuple[str, ...]) -> list[str]:
    code = (
        f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps([m for m in {UNUSED!r} if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_main_jobs_commands_import_no_torchvision():
    assert {command: imported(modules) for command, modules in MODULES.items()} == {
        "run": [],
        "report": [],
    }


def test_a_torchvision_backbone_still_builds():
    from bench.models.embedding import build_model

    model = build_model("resnet18", 8, "none", 3)
    assert "torchvision" in sys.modules
    assert sum(p.numel() for p in model.parameters()) > 1_000_000
