"""Image domains: the ``domainnet`` adapter (DomainNet layout, one domain held out), the ``domains``
view policy (k views = one image of the item's class from each seen domain) and the digit-domains
generator behind ``mvapp data synth-domains`` (registered on import)."""

from . import adapter, views  # noqa: F401  (registration side effects)

__all__ = ["adapter", "views"]
