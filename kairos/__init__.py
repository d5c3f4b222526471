"""The ``kairos`` command: one entry point dispatching to the service, simulator and training CLIs.

It lives outside ``app`` so that the service package never imports ``sim`` or ``training``.
"""
