"""NT-Xent / InfoNCE over the 2B views of a batch, and the terms that keep a tuned model near its base."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def chance_loss(batch: int) -> float:
    """nt_xent of a model that knows nothing (every view equally like the 2B-1 others): log(2B - 1). A loss divided
    by it is comparable across batch sizes (a last batch of 11 strings starts at 3.0, one of 200 at 6.0).

    >>> round(chance_loss(2), 4) == round(math.log(3), 4)
    True
    """
    return math.log(max(3, 2 * int(batch) - 1))


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float, masked: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric InfoNCE: view i of z1 and view i of z2 are positives; all other 2B-2 views are negatives, but for
    `masked` (B, B) bool: string i's views never count string j's as negatives where masked[i, j] (the diagonal
    is ignored: a string's own views stay its positive).

    Similarities are cosine, computed in fp32 whatever the autocast: at tau=0.04 a cosine of 1
    becomes a logit of 25, and exp() of that overflows fp16.

    >>> z = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    >>> float(nt_xent(z, z, 0.05)) < float(nt_xent(z, torch.randn(4, 8), 0.05))
    True
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"expected two (B, D) tensors of the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    b = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]).float(), dim=-1)
    logits = z @ z.T / temperature
    logits.fill_diagonal_(float("-inf"))  # a view is not its own negative
    if masked is not None:
        logits = logits.masked_fill(_off_diagonal(masked, z.device).repeat(2, 2), float("-inf"))
    # made on the device: a host tensor copied there (`.to(device)`) is a blocking copy, a host-device sync each step
    targets = torch.cat([torch.arange(b, 2 * b, device=z.device), torch.arange(0, b, device=z.device)])
    return F.cross_entropy(logits, targets)


def one_way(z1: torch.Tensor, z2: torch.Tensor, temperature: float, masked: torch.Tensor | None = None) -> torch.Tensor:
    """MultipleNegativesRankingLoss's form: view i of z2 (a partner) against every view of z1 (the strings); its
    positive is view i, the other B-1 its negatives but for `masked` (B, B) bool, as in `nt_xent`. Cosine in fp32.

    >>> z = torch.nn.functional.normalize(torch.randn(4, 8), dim=-1)
    >>> float(one_way(z, z, 0.05)) < float(one_way(z, torch.randn(4, 8), 0.05))
    True
    """
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"expected two (B, D) tensors of the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    a, b = F.normalize(z2.float(), dim=-1), F.normalize(z1.float(), dim=-1)
    logits = a @ b.T / temperature
    if masked is not None:
        logits = logits.masked_fill(_off_diagonal(masked, a.device), float("-inf"))
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))


# a pairs run's contrastive loss by its config's pair_loss (mirror.config.PAIR_LOSSES); a mirror run's is nt_xent
PAIR_LOSS = {"views": nt_xent, "one-way": one_way}


def _off_diagonal(masked: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`masked` on `device` without its diagonal: a string's own views stay its positive."""
    drop = masked.to(device).clone()
    drop.fill_diagonal_(False)
    return drop


def guided_mask(base: torch.Tensor, margin: float) -> torch.Tensor:
    """(B, B) bool: the pairs of strings whose frozen-base embeddings are within `margin` of the cosine of a positive
    (the same string, 1): near-duplicates the base already puts together, masked as negatives (GISTEmbed's guide).

    >>> e = torch.tensor([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]])
    >>> guided_mask(e, 0.05).int().tolist()
    [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    """
    e = F.normalize(base.float(), dim=-1)
    return (e @ e.T) > 1.0 - margin


def distill_cosine(z: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean(1 − cos(z_i, target_i)) in fp32: 0 when every embedding points where its target (the frozen base's
    embedding of the same string) does, up to 2 when opposite. Keeps tuning from moving strings far from the base.

    >>> z = torch.randn(3, 8)
    >>> float(distill_cosine(z, 2 * z)) < 1e-6 < float(distill_cosine(z, torch.randn(3, 8)))
    True
    """
    if z.shape != target.shape or z.dim() != 2:
        raise ValueError(
            f"expected two (B, D) tensors of the same shape, got {tuple(z.shape)} and {tuple(target.shape)}"
        )
    return (1.0 - F.cosine_similarity(z.float(), target.float(), dim=-1)).mean()


def l2_to_anchor(params: Sequence[torch.Tensor], anchors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Σ‖θ − θ_anchor‖² over the tensors (L2-SP, Li et al. 2018): 0 at the anchor, so it only pulls back what moved.

    >>> w = [torch.ones(2, 2)]
    >>> float(l2_to_anchor(w, [torch.ones(2, 2)])), float(l2_to_anchor(w, [torch.zeros(2, 2)]))
    (0.0, 4.0)
    """
    if len(params) != len(anchors):
        raise ValueError(f"{len(params)} tensors but {len(anchors)} anchors")
    if not params:
        return torch.zeros(())
    return torch.stack([(p.float() - a.float()).pow(2).sum() for p, a in zip(params, anchors, strict=True)]).sum()
