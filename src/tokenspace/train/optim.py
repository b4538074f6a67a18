"""Optimisers the recipes name: AdamW (torch) and LAMB (You et al. 2020, STAIR's optimiser).

torch ships no LAMB; this is the paper's algorithm (the "v3" update, as in NVIDIA apex FusedLAMB and
timm), per parameter tensor:

    m = b1 m + (1 - b1) g           v = b2 v + (1 - b2) g^2           (Adam moments)
    u = m_hat / (sqrt(v_hat) + eps) + wd * p                          (bias-corrected Adam step + decay)
    r = ||p|| / ||u||   (1 when either norm is 0)                     (layer-wise trust ratio)
    p = p - lr * r * u

The trust ratio makes each tensor move by lr * ||p|| per step whatever its gradient scale: what keeps
16K-batch training stable. As in apex and timm, tensors of a group without weight decay (biases, norms,
the logit scale) skip the ratio unless ``always_adapt``: a scalar's "layer norm" is meaningless.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("adamw", "lamb")


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, always_adapt: bool = False):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr}, betas={betas}, eps={eps}, wd={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "always_adapt": always_adapt})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            wd, eps, lr = group["weight_decay"], group["eps"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LAMB does not support sparse gradients")
                g = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = float(state["step"])
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt_().add_(eps))
                w = p.float()
                if wd:
                    update.add_(w, alpha=wd)
                ratio = 1.0
                if wd or group["always_adapt"]:
                    w_norm, u_norm = w.norm(), update.norm()
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_((update * ratio).to(p.dtype), alpha=-lr)
        return loss


def param_groups(params: Iterable[torch.nn.Parameter], weight_decay: float) -> list[dict]:
    """Decay matrices and embeddings; not biases, norms and scalars (the logit scale)."""
    params = list(params)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(name: str, groups: list[dict], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                    eps: float = 1e-8) -> torch.optim.Optimizer:
    """``groups``: torch param groups (e.g. ``param_groups(...)``); extra keys such as the trainer's
    ``lr_scale`` are kept in the group."""
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=tuple(betas), eps=eps)
    raise ValueError(f"unknown optimizer {name!r}; known: {OPTIMIZERS}")
