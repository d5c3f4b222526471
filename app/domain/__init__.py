"""The pure scheduling core: no I/O, no framework imports.

The service, the simulator and training all call :func:`app.domain.decision.decide`.
"""
