"""The shared scheduling kernel: resources and placement, the policy shapes, the tensor contract,
the :class:`~app.kernel.domain.Domain` protocol.  Pure: no I/O, no framework, no domain.

Every domain package under :mod:`app.domains` is written over this kernel; the kernel never
imports a domain (import-linter contract).
"""
