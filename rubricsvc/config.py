"""Settings, read from the environment (prefix ``RUBRICSVC_``) and an optional ``.env`` file."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_NAME = "rubricsvc"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME))


def _default_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'rubricsvc.sqlite'}"


# Each part is its own BaseSettings with its own prefix, so the variables read as
# RUBRICSVC_DATABASE_URL, RUBRICSVC_BROKER_URL, RUBRICSVC_JUDGE_MODEL_DIR, ...
class DatabaseSettings(BaseSettings):
    """Where rubrics, completions, judgments and scores live."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_DATABASE_", env_file=".env", extra="ignore"
    )

    url: str = Field(default_factory=_default_database_url)
    echo: bool = False


class BrokerSettings(BaseSettings):
    """The Celery broker; unset means scoring runs in-process."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_BROKER_", env_file=".env", extra="ignore"
    )

    url: str | None = None


class JudgeSettings(BaseSettings):
    """Defaults for the embedded judge model."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_JUDGE_", env_file=".env", extra="ignore"
    )

    # Where `rubricsvc models prepare` writes the converted embedded model.
    model_dir: Path = Field(default_factory=lambda: default_cache_dir() / "models")


class Settings(BaseSettings):
    """All settings of rubricsvc."""

    model_config = SettingsConfigDict(env_prefix="RUBRICSVC_", env_file=".env", extra="ignore")

    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests call ``get_settings.cache_clear()`` after changing env)."""
    return Settings()
