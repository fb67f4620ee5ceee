"""The multi-view loss head: every loss maps embeddings ``(n, k, d)`` to a 0-d tensor (the supervised
``supervised_ce`` head also takes the batch's labels; it is listed by ``available_losses(supervised=True)``).

Use a class directly (``M3GLoss(epsilon=0.2)(z)``) or by its registry name (``build_loss("m3g", epsilon=0.2)``,
the name a config's ``loss.name`` holds). Every class validates ``z`` (:func:`check_embeddings`),
L2-normalizes it and returns a 0-d tensor; ``loss.last_stats`` holds the call's diagnostics.

Classes, their registry names and papers:

* :class:`M3GLoss` (``m3g``): Piran et al., ICML 2024, arXiv:2405.19532
* :class:`PolyViewArithmeticLoss` (``pvc_arithmetic``): Shidani et al., ICLR 2024, arXiv:2403.05490
* :class:`PolyViewGeometricLoss` (``pvc_geometric``): Shidani et al., ICLR 2024, arXiv:2403.05490
* :class:`SufficientStatisticsLoss` (``pvc_sufficient``): Shidani et al., ICLR 2024, arXiv:2403.05490
* :class:`AggNCELoss` (``aggnce``): Cui, Huang, Wang, Wang, *AggNCE: Asymptotically Identifiable Contrastive Learning*
* :class:`MVEBLoss` (``mveb``): Wen et al., TPAMI 2024, arXiv:2403.19078
* :class:`FlatNCELoss` (``flatnce``): Chen et al., arXiv:2107.01152
* :class:`InfoNCEPairwiseLoss` (``infonce_pwe``): van den Oord et al., arXiv:1807.03748; M3G paper Eq. 3
* :class:`InfoNCEAverageLoss` (``infonce_ave``): M3G paper Eq. 4
* :class:`BYOLPairwise` (``byol_pwe``), :class:`BYOLAverage` (``byol_ave``), their base :class:`BYOLLoss`:
  Grill et al., arXiv:2006.07733; M3G paper Eq. 2
* :class:`SleepFMLeaveOneOutLoss` (``sleepfm_loo``), :class:`SleepFMPairwiseLoss` (``sleepfm_pairwise``):
  Thapa et al., ICML 2024 (SleepFM)
* :class:`SupervisedCELoss` (``supervised_ce``): the supervised ERM baseline
"""

from __future__ import annotations

from ..options import Wording, option_defaults, validate_options
from ..registry import Registry
from .base import MultiViewLoss, check_embeddings

#: Losses by name; registering sets the class's ``name``.
LOSSES: Registry[type[MultiViewLoss]] = Registry(
    "loss",
    modules=[f"{__name__}.{m}" for m in ("contrastive", "flatnce", "m3g", "mveb", "sleepfm", "supervised")],
    name_attribute="name",
)

# the loss modules register themselves in LOSSES (defined above) on import
from .contrastive import (  # noqa: E402
    AggNCELoss,
    BYOLAverage,
    BYOLLoss,
    BYOLPairwise,
    InfoNCEAverageLoss,
    InfoNCEPairwiseLoss,
    PolyViewArithmeticLoss,
    PolyViewGeometricLoss,
    SufficientStatisticsLoss,
)
from .flatnce import FlatNCELoss  # noqa: E402
from .m3g import M3GLoss  # noqa: E402
from .mveb import MVEBLoss  # noqa: E402
from .sleepfm import SleepFMLeaveOneOutLoss, SleepFMPairwiseLoss  # noqa: E402
from .supervised import SupervisedCELoss  # noqa: E402


def available_losses(supervised: bool = False) -> list[str]:
    """Names of the self-supervised losses (``loss(z)`` on embeddings alone), sorted; ``supervised=True``
    adds the heads that also take the batch's labels (``uses_labels``, e.g. ``supervised_ce``, the domain
    evaluators' ERM baseline). Every name is accepted by :func:`build_loss`.

    Examples
    --------
    >>> from multiview_app.losses import available_losses
    >>> "m3g" in available_losses(), "supervised_ce" in available_losses()
    (True, False)
    >>> "supervised_ce" in available_losses(supervised=True)
    True
    """
    return [name for name in LOSSES.names() if supervised or not getattr(LOSSES.get(name), "uses_labels", False)]


def loss_parameters(name: str) -> dict[str, object]:
    """Parameter names of loss ``name`` with their defaults (its ``Options`` model, in signature order).

    Raises ``ValueError`` for an unknown name (listing the available ones).

    Examples
    --------
    >>> from multiview_app.losses import loss_parameters
    >>> loss_parameters("aggnce")
    {'tau': 0.1, 'chunked': None}
    """
    return option_defaults(LOSSES.get(name).Options)


def build_loss(name: str, **params: object) -> MultiViewLoss:
    """Instantiate loss ``name`` (a registry name, see :func:`available_losses`) with keyword ``params``.

    Raises ``ValueError`` for an unknown name (listing the available ones), an unknown parameter
    (``loss.<key>: unknown parameter for loss '<name>'; valid: <key>=<default>, ...``) or a removed one
    (``loss.<key>: parameter removed from loss '<name>': <what replaced it>``).

    Examples
    --------
    >>> import torch
    >>> from multiview_app.losses import M3GLoss, build_loss
    >>> loss = build_loss("m3g", epsilon=0.2)
    >>> isinstance(loss, M3GLoss), loss.epsilon
    (True, 0.2)
    >>> build_loss("m3g", epsilon=0.2)(torch.randn(8, 3, 16)).shape
    torch.Size([])
    >>> build_loss("m3g", temperature=0.1)
    Traceback (most recent call last):
    ...
    ValueError: loss.temperature: unknown parameter for loss 'm3g'; valid: ...
    """
    cls = LOSSES.get(name)
    for key in params:
        if key in cls.removed_parameters:
            raise ValueError(f"loss.{key}: parameter removed from loss {name!r}: {cls.removed_parameters[key]}")
    wording = Wording(noun="parameter", owner=f"loss {name!r}", label="valid", defaults=True)
    validate_options(cls.Options, params, "loss", wording)
    return cls(**params)


__all__ = [
    "LOSSES",
    "AggNCELoss",
    "BYOLAverage",
    "BYOLLoss",
    "BYOLPairwise",
    "FlatNCELoss",
    "InfoNCEAverageLoss",
    "InfoNCEPairwiseLoss",
    "M3GLoss",
    "MVEBLoss",
    "MultiViewLoss",
    "PolyViewArithmeticLoss",
    "PolyViewGeometricLoss",
    "SleepFMLeaveOneOutLoss",
    "SleepFMPairwiseLoss",
    "SufficientStatisticsLoss",
    "SupervisedCELoss",
    "available_losses",
    "build_loss",
    "check_embeddings",
    "loss_parameters",
]
