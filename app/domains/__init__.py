"""The scheduling domains, one package each over :mod:`app.kernel`, and their registry.

A domain never imports another (import-linter contract); the service reaches a domain only
through :func:`get_domain` and the :class:`~app.kernel.domain.Domain` protocol.  Lookup imports
the domain's module on first use, so importing this package does no work.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

from app.kernel.domain import Domain

__all__ = ["DEFAULT_DOMAIN", "UnknownDomainError", "domain_names", "get_domain"]

#: domain name -> the module that defines its ``DOMAIN``
_MODULES: Final = {
    "hpc": "app.domains.hpc.domain",
    "dag": "app.domains.dag.domain",
    "gpu": "app.domains.gpu.domain",
}

DEFAULT_DOMAIN: Final = "hpc"


class UnknownDomainError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown domain {name!r}; known: {', '.join(domain_names())}")
        self.name = name


def domain_names() -> tuple[str, ...]:
    return tuple(sorted(_MODULES))


def get_domain(name: str = DEFAULT_DOMAIN) -> Domain[Any, Any, Any, Any]:
    """The domain ``name`` (:class:`UnknownDomainError` if none is registered)."""
    try:
        module = _MODULES[name]
    except KeyError:
        raise UnknownDomainError(name) from None
    domain: Domain[Any, Any, Any, Any] = importlib.import_module(module).DOMAIN
    return domain
