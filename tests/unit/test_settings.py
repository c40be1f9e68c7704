"""Settings come from RUBRICSVC_* variables, with a SQLite file in the user's data dir by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricsvc.config import Settings, default_data_dir


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUBRICSVC_DATABASE_URL", "RUBRICSVC_BROKER_URL", "RUBRICSVC_JUDGE_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.db.url == f"sqlite:///{default_data_dir() / 'rubricsvc.sqlite'}"
    assert settings.broker.url is None


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RUBRICSVC_DATABASE_URL", "postgresql://u@db/rubrics")
    monkeypatch.setenv("RUBRICSVC_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("RUBRICSVC_JUDGE_MODEL_DIR", str(tmp_path))
    settings = Settings()
    assert settings.db.url == "postgresql://u@db/rubrics"
    assert settings.broker.url == "redis://127.0.0.1:6379/0"
    assert settings.judge.model_dir == tmp_path


def test_scoring_uses_approved_versions_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUBRICSVC_SCORING_USE_DRAFTS", raising=False)
    assert Settings().scoring.use_drafts is False
    monkeypatch.setenv("RUBRICSVC_SCORING_USE_DRAFTS", "true")
    assert Settings().scoring.use_drafts is True
