"""Base class and input checks shared by every loss of the head.

Every loss takes embeddings ``z`` of shape ``(n, k, d)`` (n items, k views, d dims),
validates them, computes in float32 (half inputs) or float64 (float64 inputs),
L2-normalizes along ``d`` and returns a 0-d tensor. Diagnostics of the last call
are in ``module.last_stats`` (a :class:`LazyStats` mapping: plain floats on access; values kept
as 0-d tensors until then, so a loss call need not read the device).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ..options import SignatureOptions


def check_embeddings(
    z: torch.Tensor, *, min_views: int = 2, min_items: int = 2, check_finite: bool = True
) -> torch.Tensor:
    """Validate ``z`` of shape ``(n, k, d)`` and return it in the compute dtype.

    float16 / bfloat16 (and integer) inputs are promoted to float32; float32 and float64 stay.
    Raises ``ValueError`` naming the problem. ``check_finite=False`` leaves the NaN / Inf check (a
    host read) to the caller (:func:`nonfinite_count`).

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import check_embeddings
    >>> check_embeddings(torch.zeros(4, 2, 8, dtype=torch.float16)).dtype
    torch.float32
    >>> check_embeddings(torch.zeros(4, 8))
    Traceback (most recent call last):
    ...
    ValueError: expected embeddings of shape (n, k, d) (3-D), got shape (4, 8)
    """
    if not isinstance(z, torch.Tensor):
        raise ValueError(f"expected a torch.Tensor of shape (n, k, d), got {type(z).__name__}")
    if z.dim() != 3:
        raise ValueError(f"expected embeddings of shape (n, k, d) (3-D), got shape {tuple(z.shape)}")
    n, k, d = z.shape
    if n < min_items:
        raise ValueError(f"need n >= {min_items} items in the batch, got n={n} (shape {tuple(z.shape)})")
    if k < min_views:
        raise ValueError(f"need k >= {min_views} views, got k={k} (shape {tuple(z.shape)})")
    if d < 1:
        raise ValueError(f"need d >= 1 embedding dimensions, got d={d} (shape {tuple(z.shape)})")
    if z.dtype not in (torch.float32, torch.float64):
        z = z.float()
    if not check_finite:
        return z
    # one reduction: a NaN / Inf entry makes the sum non-finite (an overflowing sum of finite
    # values is told apart by the exact count below)
    if not bool(torch.isfinite(z.sum())):
        raise_if_nonfinite(int((~torch.isfinite(z)).sum()))
    return z


def raise_if_nonfinite(bad: float) -> None:
    """The error of :func:`check_embeddings` for ``bad`` non-finite entries (nothing if 0)."""
    if bad:
        raise ValueError(f"embeddings contain {int(bad)} non-finite values (NaN or Inf)")


def nonfinite_count(z: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """``(count, raise_if_nonfinite)``: the finiteness check of :func:`check_embeddings` deferred --
    a 0-d count of NaN / Inf entries of ``z`` for a caller that reads it back with other values."""
    return (~torch.isfinite(z)).sum(), raise_if_nonfinite


class LazyStats(MutableMapping):
    """``last_stats`` of a loss: ``str -> float`` on access. Values may be stored as 0-d tensors
    (a loss on a GPU then makes no host read for its diagnostics); the first access of one converts
    every stored tensor with one read per device. :meth:`raw` gives the stored values unconverted."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values.raw() if isinstance(values, LazyStats) else values or {})

    def _resolve(self) -> None:
        pending: dict[torch.device, list[str]] = {}
        for key, value in self._values.items():
            if isinstance(value, torch.Tensor):
                pending.setdefault(value.device, []).append(key)
        for keys in pending.values():
            floats = torch.stack([self._values[key].detach().reshape(()).double() for key in keys]).tolist()
            self._values.update(zip(keys, floats))

    def __getitem__(self, key: str) -> float:
        if isinstance(self._values[key], torch.Tensor):
            self._resolve()
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:  # without a conversion
        return key in self._values

    def raw(self) -> dict[str, Any]:
        """The stored values (floats or 0-d tensors), without a host read."""
        return dict(self._values)

    def __repr__(self) -> str:
        return f"LazyStats({self.raw()!r})"


class _Normalize(torch.autograd.Function):
    """``x / max(||x||, eps)`` along the last dimension (``F.normalize``) with a fused backward:
    ``grad_x = (g - y <g, y>) / ||x||`` where ``||x|| > eps``, ``g / eps`` where the norm was
    clamped. Same values and gradients as ``F.normalize``, fewer passes over ``x``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float) -> torch.Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        y = x / norm.clamp_min(eps)
        ctx.save_for_backward(y, norm)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        y, norm = ctx.saved_tensors
        unclamped = norm > ctx.eps
        dot = (grad * y).sum(dim=-1, keepdim=True) * unclamped
        return (grad - y * dot) / norm.clamp_min(ctx.eps), None


def normalize(z: torch.Tensor) -> torch.Tensor:
    """L2-normalize along the last dimension (``eps`` guards all-zero rows; values and gradients of
    ``F.normalize``)."""
    return _Normalize.apply(z, 1e-12 if z.dtype == torch.float64 else 1e-6)


@dataclass
class SolverTally:
    """Convergence counts of an iterative solver inside a loss (``solver``: what it is, ``limits``:
    its stopping rule, e.g. ``"max_iter 300, tol 0.001"``) since the last :meth:`pop_window`
    (``window_*``) and since the tally began (``solves``, ``unconverged``, ``worst_error``: the
    largest stopping-rule error of an unconverged solve). Plain Python numbers: the solvers that
    fill it already read their stopping rule on the host."""

    solver: str
    limits: str
    solves: int = 0
    unconverged: int = 0
    worst_error: float = 0.0
    window_solves: int = 0
    window_unconverged: int = 0

    def add(self, converged: bool, error: float) -> None:
        """Count one solve (``error``: its stopping-rule error)."""
        self.solves += 1
        self.window_solves += 1
        if not converged:
            self.unconverged += 1
            self.window_unconverged += 1
            self.worst_error = max(self.worst_error, float(error))

    def pop_window(self) -> tuple[int, int]:
        """``(solves, unconverged)`` since the last call, then restart the window."""
        out = (self.window_solves, self.window_unconverged)
        self.window_solves = self.window_unconverged = 0
        return out

    def summary(self) -> str | None:
        """``"<solver>: 37 of 840 solves did not converge (<limits>; worst error 0.012)"`` (None: all converged)."""
        if not self.unconverged:
            return None
        return (
            f"{self.solver}: {self.unconverged} of {self.solves} solves did not converge ({self.limits}; "
            f"worst error {self.worst_error:.3g})"
        )


class MultiViewLoss(SignatureOptions, nn.Module):
    """Base of every loss head: ``forward(z (n, k, d)) -> 0-d tensor``.

    Subclasses implement :meth:`compute` on already validated, normalized ``z`` and may
    fill ``self.last_stats``. Class attributes (the hooks the config checks and the trainer read):

    * ``name``: the registry name (set by ``@LOSSES.register(name)``).
    * ``Options``: the pydantic model of the loss's parameters, derived from ``__init__``.
    * ``min_views``: smallest k accepted.
    * ``needs_teacher``: the loss has no negatives and collapses without the EMA teacher.
    * ``gather_across_processes``: whether the trainer should all-gather embeddings (with
      gradient) from every process before calling the loss (True for contrastive losses whose
      negatives are the other items; False for per-process objectives such as M3G).

    * ``input`` / ``uses_labels``: what the trainer feeds the loss (see below; the supervised
      ``supervised_ce`` head takes encoder features and labels).

    :meth:`temperature` is the softmax temperature the diagnostics use (None: the loss has none).

    Examples
    --------
    A new loss implements :meth:`compute` (register it with ``@LOSSES.register("name")`` to use it by name):

    >>> import torch
    >>> from multiview_app.losses import MultiViewLoss
    >>> class MeanCosine(MultiViewLoss):
    ...     def compute(self, z):  # z: (n, k, d), already L2-normalized
    ...         return -(z[:, 0] * z[:, 1]).sum(-1).mean()
    >>> MeanCosine()(torch.randn(4, 2, 3)).shape
    torch.Size([])
    """

    name: ClassVar[str] = "base"
    min_views: ClassVar[int] = 2
    needs_teacher: ClassVar[bool] = False
    gather_across_processes: ClassVar[bool] = True
    #: what the trainer passes as ``z``: ``"embeddings"`` = the projected, L2-normalized ``model.embed``
    #: ``(n, k, d)`` (every self-supervised loss); ``"features"`` = the encoder's ``model.features``
    #: ``(n, k, f)`` before the projector (a supervised head on the backbone)
    input: ClassVar[str] = "embeddings"
    #: whether ``forward`` takes ``labels`` ``(n,)`` (the batch's class labels) as a keyword
    uses_labels: ClassVar[bool] = False
    #: parameters a former version accepted: ``{key: what replaced it}`` (:func:`.build_loss` refuses them with that)
    removed_parameters: ClassVar[dict[str, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.last_stats: LazyStats = LazyStats()
        #: convergence counts of the loss's iterative solver (None: the loss has none)
        self.solver_tally: SolverTally | None = None
        #: True: solver non-convergence is only counted in ``solver_tally`` (the trainer reports it
        #: through the run's logger); False: also a ``RuntimeWarning`` (once per module)
        self.quiet_solver = False
        #: True: a call refuses NaN / Inf embeddings at once (``ValueError``; one host read per call);
        #: False: the caller checks them (the trainer flags them on the device and reads the flag on
        #: logging steps, naming the step), and the loss reads nothing back
        self.check_finite = True

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # noqa: D401
        """Loss of embeddings ``z`` of shape ``(n, k, d)``; returns a 0-d tensor."""
        z = normalize(check_embeddings(z, min_views=self.min_views, check_finite=self.check_finite))
        self.last_stats = LazyStats()
        loss = self.compute(z)
        self._record_loss(loss)
        return loss

    def _record_loss(self, loss: torch.Tensor) -> None:
        """``last_stats`` as a :class:`LazyStats` with ``loss`` (kept as a tensor: no host read)."""
        if not isinstance(self.last_stats, LazyStats):
            self.last_stats = LazyStats(self.last_stats)
        if "loss" not in self.last_stats:
            self.last_stats["loss"] = loss.detach()

    def compute(self, z: torch.Tensor) -> torch.Tensor:
        """Loss of normalized embeddings ``z`` ``(n, k, d)``."""
        raise NotImplementedError

    def temperature(self) -> float | None:
        """The current softmax temperature of the loss (None: it has none)."""
        return None


def check_positive(name: str, value: float, *, loss: str) -> float:
    """Return ``float(value)`` or raise ``ValueError`` if it is not a finite positive number."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"loss '{loss}': parameter {name} must be a number, got {value!r}") from None
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"loss '{loss}': parameter {name} must be > 0, got {value}")
    return value


def check_chunked(value: object, *, loss: str) -> bool | None:
    """Return a loss's ``chunked`` parameter (``True`` / ``False`` / ``None`` = automatic) or raise
    ``ValueError`` for anything else."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"loss '{loss}': parameter chunked must be true, false or null, got {value!r}")
    return value
