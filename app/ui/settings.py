"""Dashboard settings (``KAIROS_`` prefix like the service's own settings)."""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class UISettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KAIROS_", extra="ignore", frozen=True)

    #: Directory of the evaluation report: its PNG/SVG plots (found recursively) are shown.
    REPORTS_DIR: str = "docs/results"
    #: Rows shown per table (pending jobs, running jobs, recent decisions).
    UI_ROWS: int = 50


@lru_cache
def get_ui_settings() -> UISettings:
    return UISettings()
