"""A judge's (or a rubric generator's) model given as a local folder: hashed by its files'
contents, as an adapter is, so weights retrained in place are another judge; a hub id, a served
model's name and the embedded model keep the hashes they always had. The files here are
stand-ins (the hash reads bytes, not tensors)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.orm import Session

from rubricsvc.backends import weights_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.scoring.judge_configs import ensure_judge_config, latest_judge_config, weights_gate


def _model(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("a model", encoding="utf-8")
    for path in folder.iterdir():  # set back, as a copy that keeps them would
        os.utime(path, (1_700_000_000, 1_700_000_000))
    return folder


def _judge(model: str | Path | None, **more: object) -> JudgeSpec:
    given = {"model": str(model)} if model is not None else {}
    return JudgeSpec.model_validate({"name": "local", **given, **more})


@pytest.fixture(autouse=True)
def hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hashes kept in a folder of the test's own, and none in memory from another test."""
    cache = tmp_path / "hash-cache"
    monkeypatch.setattr(weights_hash, "hash_cache_dir", lambda: cache)
    monkeypatch.setattr(weights_hash, "_HASHED", {})
    return cache


def test_a_model_folders_contents_are_in_the_config_hash(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", b"weights one")
    first = _judge(folder)
    assert first.hashed_settings()["model_sha256"] == first.model_sha256()
    assert first.model_sha256() == weights_hash.files_sha256(
        [folder / "config.json", folder / "model.safetensors"]
    )

    # Other weights at the same path: another judge.
    _model(folder, b"weights two")
    second = _judge(folder)
    assert second.config_hash() != first.config_hash()

    # A read-me is no weight: editing it is the same judge.
    (folder / "README.md").write_text("edited", encoding="utf-8")
    assert _judge(folder).config_hash() == second.config_hash()

    # The same files elsewhere are the same weights (the path stays in the hash, as given).
    moved = _judge(_model(tmp_path / "elsewhere", b"weights two"))
    assert moved.model_sha256() == second.model_sha256()


def test_names_that_are_no_local_folder_keep_their_hash(tmp_path: Path) -> None:
    for spec in (_judge(None), _judge("HuggingFaceTB/SmolLM2-135M-Instruct")):
        assert spec.model_sha256() is None
        assert "model_sha256" not in spec.hashed_settings()
    # A served model's name is not read from this machine, even where a folder has that name.
    folder = _model(tmp_path / "served", b"weights")
    served = _judge(folder, backend="openai", backend_options={"base_url": "http://x/v1"})
    assert served.model_sha256() is None


def test_a_model_folder_without_model_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("nothing else", encoding="utf-8")
    with pytest.raises(ValidationError, match="holds no model files"):
        _judge(tmp_path / "empty")


def _settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as older than a rewrite within one tick of the clock, so their hash may be
    kept (instead of waiting ``RECENT_SECONDS`` for them to be)."""
    monkeypatch.setattr(weights_hash, "RECENT_SECONDS", -1.0)


def test_a_hash_is_read_once_per_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hash_cache: Path
) -> None:
    _settled(monkeypatch)
    folder = _model(tmp_path / "m", b"weights")
    hashed = _judge(folder).model_sha256()
    assert hashed is not None and len(list(hash_cache.iterdir())) == 1

    # Another process (nothing in memory) finds it kept, and reads no file.
    monkeypatch.setattr(weights_hash, "_HASHED", {})

    def unread(files: object) -> str:
        raise AssertionError("the files were read again")

    monkeypatch.setattr(weights_hash, "files_sha256", unread)
    assert _judge(folder).model_sha256() == hashed

    # Rewritten: the kept hash is not used; the one entry of the folder is replaced.
    monkeypatch.undo()
    monkeypatch.setattr(weights_hash, "hash_cache_dir", lambda: hash_cache)
    _settled(monkeypatch)
    _model(folder, b"retrained")
    retrained = _judge(folder).model_sha256()
    assert retrained not in (None, hashed)
    assert len(list(hash_cache.iterdir())) == 1


def test_a_kept_hash_that_is_not_whole_is_read_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hash_cache: Path
) -> None:
    _settled(monkeypatch)
    folder = _model(tmp_path / "m", b"weights")
    hashed = _judge(folder).model_sha256()
    (entry,) = hash_cache.iterdir()
    entry.write_text('{"files": [', encoding="utf-8")  # cut short
    weights_hash._HASHED.clear()
    assert _judge(folder).model_sha256() == hashed


def test_weights_retrained_in_place_are_the_names_next_config(
    tmp_path: Path, session: Session
) -> None:
    folder = _model(tmp_path / "m", b"weights one")
    first = ensure_judge_config(session, _judge(folder))
    _model(folder, b"weights two")
    again = _judge(folder)
    second = ensure_judge_config(session, again)
    # The same settings, other weights: a new config of the name, the old one's verdicts kept
    # apart (never replayed for the new weights).
    assert second.id != first.id and second.config_hash == again.config_hash()
    assert latest_judge_config(session, "local") is second


def test_a_generators_local_model_is_hashed_too(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", b"weights one")
    first = GeneratorSpec.model_validate({"model": str(folder)})
    assert first.hashed_settings()["model_sha256"] == _judge(folder).model_sha256()
    _model(folder, b"weights two")
    second = GeneratorSpec.model_validate({"model": str(folder)})
    assert second.config_hash() != first.config_hash()
    assert "model_sha256" not in GeneratorSpec.model_validate({}).hashed_settings()


def test_a_name_too_long_for_a_path_is_no_folder(session: Session) -> None:
    # Path.is_dir raises for it (ENAMETOOLONG): a served model's name, never a folder here.
    spec = _judge("m" * 400)
    assert spec.model_sha256() is None
    assert weights_gate(session, spec) is None  # no gate looked up under a folder's name
