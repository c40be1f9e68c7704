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


def test_groups_by_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transport, job policy and judge limits are read from their own prefixes."""
    monkeypatch.setenv("RUBRICSVC_BROKER_QUEUE_PREFIX", "q.")
    monkeypatch.setenv("RUBRICSVC_JOBS_HEARTBEAT_TIMEOUT", "33")
    monkeypatch.setenv("RUBRICSVC_JUDGE_API_LIMITS", '{"paid": {"concurrent_calls": 2}}')
    settings = Settings()
    assert settings.broker.queue_prefix == "q."
    assert settings.jobs.heartbeat_timeout == 33.0
    assert settings.judge.api_limits["paid"].concurrent_calls == 2
    assert not hasattr(settings.broker, "heartbeat_timeout")  # no longer the broker's


def test_plugins_are_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUBRICSVC_PLUGINS", "json, email.utils ,")
    assert Settings().plugins == ["json", "email.utils"]
    monkeypatch.delenv("RUBRICSVC_PLUGINS")
    assert Settings().plugins == []


def test_a_plugin_that_cannot_be_imported_is_named_in_one_line() -> None:
    from rubricsvc.errors import ValidationFailed
    from rubricsvc.plugins import load_plugins

    assert load_plugins(["json"])[:1] == ["json"]
    with pytest.raises(ValidationFailed) as raised:
        load_plugins(["json", "no_such_plugin_module"])
    message = str(raised.value)
    assert "'no_such_plugin_module'" in message and "RUBRICSVC_PLUGINS" in message
    assert "\n" not in message


def test_a_variable_of_the_old_group_is_refused_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("RUBRICSVC_BROKER_HEARTBEAT_TIMEOUT", "5")
    with pytest.raises(ValidationError, match="is now RUBRICSVC_JOBS_HEARTBEAT_TIMEOUT"):
        Settings()
    monkeypatch.delenv("RUBRICSVC_BROKER_HEARTBEAT_TIMEOUT")
    monkeypatch.setenv("RUBRICSVC_BROKER_API_LIMITS", "{}")
    with pytest.raises(ValidationError, match="is now RUBRICSVC_JUDGE_API_LIMITS"):
        Settings()
