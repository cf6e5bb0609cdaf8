"""A run's arithmetic (`--precision`): fp32, the papers'; bf16 or fp16, the network's forward
under torch's autocast, channels-last where it convolves, the loss computed in fp32 on
embeddings cast back, and for fp16 a gradient scaler (its range is narrow: small gradients
would round to 0). Autocast runs on the CPU too (bf16 and fp16), so that CI trains with it."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from bench.train.choices import PRECISIONS

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """What a run's precision does to its forward passes, its model and its steps."""

    def __init__(self, name: str, device: torch.device) -> None:
        if name not in PRECISIONS:
            raise ValueError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}")
        self.name, self.device = name, torch.device(device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=name == "fp16")

    @property
    def reduced(self) -> bool:
        return self.name != "fp32"

    def autocast(self) -> AbstractContextManager:
        """The context of a forward pass: autocast to bf16 or fp16, nothing for fp32."""
        if not self.reduced:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.name])

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model, channels-last where it convolves (in reduced precision only: fp32 runs
        keep the layout, and so the bits, they always had)."""
        if self.reduced and convolves(model):
            model.to(memory_format=torch.channels_last)
        return model

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        if self.reduced and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def step(self, value: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Backward and the optimiser's step; with fp16, through the gradient scaler (which
        skips a step whose gradients overflowed and lowers its scale)."""
        if not self.scaler.is_enabled():
            value.backward()
            optimizer.step()
            return
        self.scaler.scale(value).backward()
        self.scaler.step(optimizer)
        self.scaler.update()


def convolves(model: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
