r"""The SDLP loss (paper eq. 5-6): per response token, KL(p~T || p~S) on the teacher's top-``k`` support.

``sdlp_loss`` takes explicit logits (the reference); ``chunked_sdlp_loss`` is what :class:`icw.train.sdlp.SDLPTrainer`
computes, from hidden states with the output heads applied chunk by chunk (the memory plan is in
:mod:`icw.train.sdlp`'s docstring).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

__all__ = ["chunked_sdlp_loss", "sdlp_loss"]


def _kl_on_support(teacher_logits: torch.Tensor, student_logits: torch.Tensor | Callable[[], torch.Tensor],
                   top_k: int | None) -> torch.Tensor:
    """Per-position KL(p~T || p~S) with ``teacher_logits`` already perturbed (float32, no grad).

    ``student_logits`` may be a callable so the student's chunk is materialized only after
    the teacher's full-vocabulary tensor has been reduced to its top-k.
    """
    if top_k is None or top_k >= teacher_logits.shape[-1]:
        teacher_logp = torch.log_softmax(teacher_logits, dim=-1)
        del teacher_logits
        student = student_logits() if callable(student_logits) else student_logits
        student_logp = torch.log_softmax(student.float(), dim=-1)
    else:
        values, support = teacher_logits.topk(top_k, dim=-1)
        del teacher_logits
        teacher_logp = torch.log_softmax(values, dim=-1)
        student = student_logits() if callable(student_logits) else student_logits
        student_logp = torch.log_softmax(student.gather(-1, support).float(), dim=-1)
    return (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)


def sdlp_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, response_mask: torch.Tensor | None = None,
              delta: torch.Tensor | None = None, top_k: int | None = 1000) -> torch.Tensor:
    r"""The SDLP loss on explicit logits: ``mean_b sum_t KL(p~T_bt || p~S_bt)`` (paper eq. 5-6).

    Args:
        student_logits: ``(B, T, V)`` student logits at the response positions.
        teacher_logits: ``(B, T, V)`` teacher logits at the same positions (treated as constants).
        response_mask: ``(B, T)``, 1 on response tokens, 0 on padding (default: all ones).
        delta: ``(B, T, V)`` or ``(B, 1, V)`` perturbation added to the teacher's logits (0 if None).
        top_k: teacher support size ``k``; ``None`` uses the full vocabulary.

    Example:
        >>> s, t = torch.randn(2, 3, 50), torch.randn(2, 3, 50)
        >>> bool(sdlp_loss(t.clone(), t, top_k=5).abs() < 1e-6)
        True
    """
    teacher = teacher_logits.detach().float()
    if delta is not None:
        teacher = teacher + delta.float()
    kl = _kl_on_support(teacher, student_logits, top_k)
    if response_mask is not None:
        kl = kl * response_mask.to(kl.dtype)
    return kl.sum(-1).mean()


def chunked_sdlp_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, student_head: Callable,
                      teacher_head: Callable, response_mask: torch.Tensor, bias_rows: torch.Tensor,
                      bias_values: torch.Tensor, bias_index: torch.Tensor, top_k: torch.Tensor,
                      chunk_size: int = 256, bias_unused_only: torch.Tensor | None = None,
                      response_ids: torch.Tensor | None = None, per_row: bool = False) -> torch.Tensor:
    """The SDLP loss from hidden states at the response positions (``(B, T, H)`` each), applying
    the output heads chunk by chunk over the ``N`` real response positions.

    ``bias_unused_only`` ``(M,)`` marks bias rows that skip the tokens of ``response_ids`` ``(B, T)``
    before each position (:class:`icw.train.sdlp.SDLPCollator` with ``tsp_unused_only``).

    ``top_k[b] == 0`` means the full vocabulary for row ``b``; the full-vocabulary path runs each
    chunk under activation checkpointing so nothing of size ``V`` is kept for backward.

    With ``per_row`` it returns the ``(B,)`` per-row sums ``sum_t KL_bt`` instead (the loss is their mean): the
    trainer logs them by family, so a run shows how much of its loss each family carries.

    Args:
        student_hidden, teacher_hidden (`torch.Tensor`): ``(B, T, H)`` final hidden states at the response positions.
        student_head, teacher_head (`Callable`): the output heads, hidden states to logits.
        response_mask (`torch.Tensor`): ``(B, T)``, 1 on response tokens.
        bias_rows (`torch.Tensor`): ``(M, V)`` boolean perturbation table (row 0: no bias).
        bias_values (`torch.Tensor`): ``(M,)`` strength of each table row.
        bias_index (`torch.Tensor`): ``(B, T)`` the table row of each position.
        top_k (`torch.Tensor`): ``(B,)`` teacher support size per row (0: full vocabulary).
        chunk_size (`int`, defaults to 256): positions per application of the heads.
        bias_unused_only (`torch.Tensor`, *optional*): ``(M,)`` table rows gated to tokens not used yet.
        response_ids (`torch.Tensor`, *optional*): ``(B, T)`` the response tokens (needed with the gate).
        per_row (`bool`, defaults to `False`): return the ``(B,)`` per-row sums instead of their mean.
    """
    batch = response_mask.shape[0]
    mask = response_mask.bool()
    rows = torch.arange(batch, device=mask.device)[:, None].expand_as(mask)[mask]
    s_h, t_h, b_idx = student_hidden[mask], teacher_hidden[mask], bias_index[mask]
    t_pos = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)[mask]
    k_pos = top_k.to(mask.device)[rows]
    totals = student_hidden.new_zeros(batch, dtype=torch.float32)

    def teacher_logits(h: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = teacher_head(h).float()
            b = b_idx[part]
            delta = bias_rows[b].to(logits.dtype)
            delta.mul_(bias_values.to(logits.device)[b, None])
            gated = None if bias_unused_only is None else bias_unused_only.to(logits.device)[b]
            if gated is not None and gated.any():  # chunks without gated rows skip the (chunk, V) mask
                earlier = response_ids[rows[part]].clone()  # tokens before each position; later ones point past V
                earlier[torch.arange(earlier.shape[1], device=earlier.device) >= t_pos[part, None]] = logits.shape[-1]
                used = torch.zeros(len(part), logits.shape[-1] + 1, dtype=torch.bool, device=logits.device)
                used.scatter_(1, earlier.clamp(max=logits.shape[-1]), True)
                delta.masked_fill_(used[:, :-1] & gated[:, None], 0.0)
            return logits.add_(delta)

    def full_vocab(h_s: torch.Tensor, h_t: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        return _kl_on_support(teacher_logits(h_t, part), lambda: student_head(h_s), None)

    for k in torch.unique(k_pos).tolist():
        sel = torch.nonzero(k_pos == k).squeeze(-1)
        for start in range(0, len(sel), chunk_size):
            part = sel[start : start + chunk_size]
            if k == 0:
                if torch.is_grad_enabled():
                    kl = checkpoint(full_vocab, s_h[part], t_h[part], part, use_reentrant=False)
                else:
                    kl = full_vocab(s_h[part], t_h[part], part)
            else:
                kl = _kl_on_support(teacher_logits(t_h[part], part), lambda p=part: student_head(s_h[p]), int(k))
            totals = totals.index_add(0, rows[part], kl)
    return totals if per_row else totals.sum() / batch
