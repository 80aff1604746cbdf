"""The book's one optimiser step for small Torch models: Adam with a cosine-decayed learning rate and clipping."""
from __future__ import annotations

from typing import Iterable

import torch


class AdamCosine:
    """Adam on ``params`` with the learning rate decayed from ``lr`` to 0 over ``steps`` by a cosine.

    :meth:`step` takes a scalar loss, back-propagates it, clips the gradient norm of ``clip_params`` (all of
    ``params`` unless given; ``clip=None`` skips clipping) at ``clip``, updates the parameters and advances the
    schedule. It returns ``loss.item()``.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, steps: int, clip: float | None = 1.0,
                 clip_params: Iterable[torch.nn.Parameter] | None = None):
        params = list(params)
        if lr <= 0 or steps < 1:
            raise ValueError(f"lr must be > 0 and steps >= 1, got lr={lr}, steps={steps}")
        if clip is not None and clip <= 0:
            raise ValueError(f"clip must be > 0 or None, got {clip}")
        self.opt = torch.optim.Adam(params, lr=lr)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, steps)
        self.clip = clip
        self.clip_params = params if clip_params is None else list(clip_params)

    def step(self, loss: torch.Tensor) -> float:
        self.opt.zero_grad()
        loss.backward()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.clip_params, self.clip)
        self.opt.step()
        self.sched.step()
        return loss.item()
