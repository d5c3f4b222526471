"""The dashboard at ``/ui``: server-rendered pages over the same services as the API.

``app.main.create_app`` includes :data:`router`. Nothing is built at import time: the template
environment and the UI settings are created on first use.
"""

from app.ui.router import router

__all__ = ["router"]
