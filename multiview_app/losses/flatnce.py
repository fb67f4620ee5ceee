"""FlatNCE (Chen et al., Alg. 1 / Eq. 6) for k views, with optional ESS scheduling of tau (Alg. S1).

For every anchor ``(i, alpha)``, positive ``(i, beta)`` (``beta != alpha``) and the negatives of
``(i, alpha)`` (all views of the other items, ``K = (n - 1) k`` of them):

    c = logsumexp_{j != i, gamma}( s(i alpha, j gamma) - s(i alpha, i beta) )

The gradient is that of ``mean(exp(c - detach(c)))``; the returned value is FlatCLR's
``surrogate - 1 + detach(InfoNCE)`` with ``InfoNCE = mean softplus(c)``, i.e. it reads as the matching
InfoNCE (the same anchors, positives and negatives; equal to ``pvc_geometric``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from . import LOSSES
from .base import check_positive
from .contrastive import TemperatureLoss, off_diagonal, other_item_logsumexp, positive_logits


def effective_sample_size(negatives_weight_sq: torch.Tensor, num_negatives: int) -> torch.Tensor:
    """FlatNCE Eq. 10 per anchor: ``ESS = 1 / (K sum_j w_j^2)`` in ``[1 / K, 1]`` from the softmax
    weights' ``sum_j w_j^2`` (any shape) over ``K = num_negatives`` negatives."""
    return 1.0 / (num_negatives * negatives_weight_sq)


def batch_ess(z: torch.Tensor, tau: float) -> float:
    """Mean ESS over the anchors of unit-vector embeddings ``z`` ``(n, k, d)``: the softmax over the
    ``(n - 1) k`` other-item negatives of each anchor ``(i, alpha)`` at temperature ``tau``."""
    n, k, _ = z.shape
    _, weight_sq = other_item_logsumexp(z, z, tau, return_weight_sq=True)
    return float(effective_sample_size(weight_sq, (n - 1) * k).mean())


@LOSSES.register("flatnce")
class FlatNCELoss(TemperatureLoss):
    """FlatNCE over all ordered view pairs, with optional ESS scheduling of ``tau`` (registry name ``flatnce``).

    Chen, Gan, Li, Guo, Chen, Gao, Lu, Chung, Xu, Zeng, Li, Carin, Tao. *Simpler, Faster, Stronger:
    Breaking the log-K Curse on Contrastive Learners with FlatNCE*. arXiv:2107.01152.

    Alg. 1 / Eq. 6 for every anchor ``(i, alpha)`` and positive ``(i, beta)``, ``beta != alpha``:
    ``c = logsumexp_{j != i, gamma}(s(i alpha, j gamma) - s(i alpha, i beta))`` over the ``K = (n - 1) k``
    negatives; the gradient is that of ``mean(exp(c - detach(c)))``. Effective sample size: Eq. 10.
    ``last_stats``: ``loss`` (= ``infonce``), ``infonce``, ``ess``, ``tau`` (used in this call),
    ``mi_lower_bound`` (``log(n k - k + 1) - infonce``).

    Deviations from the paper:

    * the returned value is FlatCLR's ``surrogate - 1 + detach(InfoNCE)`` with ``InfoNCE = mean softplus(c)``:
      it reads as the matching InfoNCE (the same anchors, positives and negatives; equal to
      :class:`PolyViewGeometricLoss`), while its gradient is FlatNCE's;
    * ESS scheduling (``ess_target``) reverses Alg. S1's direction: ``tau`` is multiplied by ``1 - ess_rate``
      when the batch ESS is above the target and by ``1 + ess_rate`` otherwise, which drives the ESS towards
      the target; Alg. S1 as printed updates the *inverse* temperature that way, which moves it away. The
      scheduled ``tau`` lives on the embeddings' device (the update reads nothing back); reading ``loss.tau``
      is a host read.

    Parameters
    ----------
    tau : float, default 0.1
        Initial temperature, > 0 (kept in ``state_dict`` when scheduled).
    ess_target : float or None, default None
        ``None``: fixed ``tau``; a value in ``(0, 1]``: adapt ``tau`` after each training-mode call.
    ess_rate : float, default 0.01
        Adaptation rate gamma in ``(0, 1)`` (0.01 in the paper).
    chunked : bool or None, default None
        As in :class:`PolyViewGeometricLoss`.

    Returns
    -------
    torch.Tensor
        ``loss(z)`` for embeddings ``z`` of shape ``(n, k, d)`` (L2-normalized inside) is a 0-d tensor.

    Raises
    ------
    ValueError
        For ``tau <= 0``, ``ess_target`` outside ``(0, 1]``, ``ess_rate`` outside ``(0, 1)``; at call, for
        ``z`` that is not ``(n, k, d)`` with ``n >= 2``, ``k >= 2``, or that holds NaN / Inf.

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import FlatNCELoss
    >>> z = torch.randn(8, 3, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    >>> loss = FlatNCELoss(tau=0.5)(z)
    >>> loss.shape
    torch.Size([])
    >>> from multiview_app.losses import PolyViewGeometricLoss  # the value reads as the matching InfoNCE
    >>> torch.allclose(loss, PolyViewGeometricLoss(tau=0.5)(z))
    True
    >>> scheduled = FlatNCELoss(tau=0.5, ess_target=1e-3)  # ESS above target: tau shrinks
    >>> _ = scheduled(z)
    >>> scheduled.tau < 0.5
    True
    """

    #: scheduled tau on the device (None: not yet scheduled, ``_tau_host`` holds it); ``_tau_floor``: a
    #: host-side lower bound of it (``_tau_host`` times ``1 - ess_rate`` per update since the last read)
    _tau_device: torch.Tensor | None = None
    _tau_host: float = 0.1
    _tau_floor: float = 0.1

    def __init__(
        self, tau: float = 0.1, ess_target: float | None = None, ess_rate: float = 0.01, chunked: bool | None = None
    ) -> None:
        super().__init__(tau, chunked)
        if ess_target is not None:
            ess_target = check_positive("ess_target", ess_target, loss=self.name)
            if ess_target > 1.0:
                raise ValueError(f"loss '{self.name}': parameter ess_target must be in (0, 1], got {ess_target}")
        rate = check_positive("ess_rate", ess_rate, loss=self.name)
        if rate >= 1.0:
            raise ValueError(f"loss '{self.name}': parameter ess_rate must be in (0, 1), got {rate}")
        self.ess_target = ess_target
        self.ess_rate = rate

    @property
    def tau(self) -> float:
        """The current temperature (a host read of the device copy once scheduling has started; it also
        resets the host-side lower bound that picks the constant-shift path)."""
        if self._tau_device is None:
            return self._tau_host
        self._tau_host = float(self._tau_device)
        self._tau_floor = self._tau_host
        return self._tau_host

    @tau.setter
    def tau(self, value: float) -> None:
        self._tau_host = self._tau_floor = float(value)
        self._tau_device = None

    def _call_tau(self, like: torch.Tensor) -> float | torch.Tensor:
        """The temperature of this call: the float ``tau``, or with ESS scheduling a float64 0-d tensor on
        ``like``'s device (updated there after each training-mode call, so nothing is read back)."""
        if self.ess_target is None:
            return self._tau_host
        if self._tau_device is None:  # a fill kernel, not a copy from pageable host memory
            self._tau_device = torch.full((), self._tau_host, dtype=torch.float64, device=like.device)
        elif self._tau_device.device != like.device:
            self._tau_device = self._tau_device.to(like.device)
        return self._tau_device

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        n, k, _ = z.shape
        tau = self._call_tau(z)
        # logsumexp over the K = (n - 1) k negatives of (i, alpha) and sum_j w_j^2 of their softmax
        negatives, weight_sq = other_item_logsumexp(
            z, z, tau, return_weight_sq=True, chunked=self.chunked, tau_floor=self._tau_floor
        )  # (n, k) each
        positive = off_diagonal(positive_logits(z, tau))  # (n, k, k - 1) [i, alpha, beta]
        c = negatives[:, :, None] - positive  # (n, k, k - 1)
        surrogate = torch.exp(c - c.detach()).mean()
        with torch.no_grad():
            infonce = F.softplus(c).mean()
            ess = effective_sample_size(weight_sq, (n - 1) * k).mean()
        # device tensors until a logging step reads them (last_stats)
        self.last_stats.update(infonce=infonce, ess=ess, tau=tau, mi_lower_bound=math.log(n * k - k + 1) - infonce)
        if self.ess_target is not None and self.training:
            # not in place: this call's tau stays in its autograd graph and stats
            self._tau_device = torch.where(
                ess > self.ess_target, tau * (1.0 - self.ess_rate), tau * (1.0 + self.ess_rate)
            )
            self._tau_floor *= 1.0 - self.ess_rate
        return surrogate - 1.0 + infonce

    def extra_repr(self) -> str:
        return f"tau={self.tau}, ess_target={self.ess_target}, ess_rate={self.ess_rate}, chunked={self.chunked}"

    def get_extra_state(self) -> dict[str, Any]:
        """Keep the scheduled tau in checkpoints (``state_dict``)."""
        return {"tau": self.tau}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.tau = check_positive("tau", state["tau"], loss=self.name)
