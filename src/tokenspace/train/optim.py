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

The step runs multi-tensor kernels (``torch._foreach_*``): a few launches per parameter group instead of
~15 per tensor, which on a GPU is what the step's time was (stair-paper's 357 tensors: the host spent
103 ms a step launching LAMB's kernels, docs/scale.md). ``foreach=False`` keeps the per-tensor loop, the
reference the multi-tensor step is tested against: the same update, with norms summed in another order,
so the two agree to float rounding, not to the bit. Neither changes the state_dict.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("adamw", "lamb")


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, always_adapt: bool = False, foreach: bool = True):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid LAMB hyper-parameters lr={lr}, betas={betas}, eps={eps}, wd={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "always_adapt": always_adapt})
        # an attribute, not a group default: checkpoints stay loadable both ways
        self.foreach = foreach

    def _state(self, p: torch.Tensor) -> dict:
        if p.grad.is_sparse:
            raise RuntimeError("LAMB does not support sparse gradients")
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)  # on the CPU: reading it never syncs a GPU
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        elif state["step"].device.type != "cpu":  # a checkpoint loaded with map_location=cuda: back once
            state["step"] = state["step"].cpu()
        return state

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if self.foreach:
                self._foreach_group(group)
            else:
                self._per_tensor_group(group)
        return loss

    def _foreach_group(self, group: dict) -> None:
        """The group's tensors in buckets of one device and one step count (each tensor's bias correction
        is its own step's, as in the per-tensor loop), each bucket updated by multi-tensor kernels."""
        b1, b2 = group["betas"]
        wd, eps, lr = group["weight_decay"], group["eps"], group["lr"]
        adapt = bool(wd) or group["always_adapt"]
        buckets: dict[tuple, list[torch.Tensor]] = {}
        for p in group["params"]:
            if p.grad is not None:
                buckets.setdefault((p.device, float(self._state(p)["step"])), []).append(p)
        for (_, done), ps in buckets.items():
            states = [self.state[p] for p in ps]
            torch._foreach_add_([s["step"] for s in states], 1)
            t = done + 1
            gs = [p.grad.float() for p in ps]  # the gradients themselves when they are float32: not written
            ms = [s["exp_avg"] for s in states]
            vs = [s["exp_avg_sq"] for s in states]
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, gs, alpha=1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
            denom = torch._foreach_div(vs, 1 - b2 ** t)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            update = torch._foreach_div(ms, 1 - b1 ** t)
            torch._foreach_div_(update, denom)
            ws = [p.float() for p in ps]  # the parameters themselves when float32: read, never written here
            if wd:
                torch._foreach_add_(update, ws, alpha=wd)
            if adapt:
                w_norm = torch.stack(torch._foreach_norm(ws))
                u_norm = torch.stack(torch._foreach_norm(update))
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                torch._foreach_mul_(update, list(ratio.unbind()))
            if all(p.dtype == torch.float32 for p in ps):
                torch._foreach_add_(ps, update, alpha=-lr)
            else:  # bf16 / fp16 / fp64 parameters: the float32 update cast to each one's dtype
                for p, u in zip(ps, update):
                    p.add_(u.to(p.dtype), alpha=-lr)

    def _per_tensor_group(self, group: dict) -> None:
        """The reference: the update tensor by tensor (~15 kernel launches each)."""
        b1, b2 = group["betas"]
        wd, eps, lr = group["weight_decay"], group["eps"], group["lr"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self._state(p)
            g = p.grad.float()
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
