"""Evaluation protocols: pure functions from features and labels to metrics.

A protocol knows nothing about run folders, checkpoints or adapters: it takes arrays (features
``(N, D)``, labels ``(N,)``, group ids such as subjects or domains, embeddings of two modalities) and
options, and returns a JSON-ready ``dict`` of metrics. Evaluators (``mvapp eval``), training callbacks
(monitors) and ``mvapp tune``'s objective all reach the maths through this one registry, so a metric
is computed by one code path wherever it is reported.

``PROTOCOLS`` maps a name (``few-shot-staging``, ``linear-probe``, ``knn``, ``retrieval``,
``leave-one-domain-out``, ...) to a callable ``protocol(**inputs_and_options) -> dict[str, Any]``.
Modules listed in ``PROTOCOL_MODULES`` are imported (so that they register) on the registry's first
lookup; add new protocol modules there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...registry import Registry

#: Modules that register protocols (imported on the registry's first lookup); add new ones here.
PROTOCOL_MODULES: tuple[str, ...] = (
    "multiview_app.eval.protocols.domains",
    "multiview_app.eval.protocols.probe",
    "multiview_app.eval.protocols.retrieval",
    "multiview_app.eval.protocols.staging",
)

Protocol = Callable[..., dict[str, Any]]
PROTOCOLS: Registry[Protocol] = Registry("protocol", modules=PROTOCOL_MODULES)


def get_protocol(name: str) -> Protocol:
    """The protocol registered as ``name`` (ValueError listing the valid names)."""
    return PROTOCOLS.get(name)


__all__ = ["PROTOCOLS", "PROTOCOL_MODULES", "Protocol", "get_protocol"]
