"""A judge's LoRA adapter as configuration: hashed by its files' contents, resolved beside the
judge file that names it, refused in one line by the backends that cannot apply it. The files
here are stand-ins (the hash reads bytes, not tensors); tests/integration/test_lora_judges.py
serves real adapters."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from pydantic import ValidationError

from rubricsvc.backends import backend_from_spec
from rubricsvc.backends.adapters import adapter_sha256
from rubricsvc.backends.kept import loaded_backend_key
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.scoring.judge_configs import _model_label, load_judge_file


def _adapter(folder: Path, weights: bytes, rank: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank}), encoding="utf-8")
    (folder / "adapter_model.safetensors").write_bytes(weights)
    # Modification times set back, as a copy that keeps them would: the hash must still see
    # the new bytes (the change time is the clock's).
    for path in folder.iterdir():
        os.utime(path, (1_700_000_000, 1_700_000_000))
    return folder


def _spec(adapter: Path | None, name: str = "lora", **more: object) -> JudgeSpec:
    given = {"adapter": str(adapter)} if adapter is not None else {}
    return JudgeSpec.model_validate({"name": name, "model": "/models/base", **given, **more})


def test_the_adapters_contents_are_in_the_config_hash(tmp_path: Path) -> None:
    base = _spec(None, name="base")
    first = _spec(_adapter(tmp_path / "a", b"weights one"))
    assert first.config_hash() != base.config_hash()
    assert first.hashed_settings()["adapter_sha256"] == adapter_sha256(tmp_path / "a")
    # A judge without an adapter hashes as it always did: no adapter key at all.
    assert "adapter_sha256" not in base.hashed_settings()

    # Other weights, or another config, at the same path: another judge.
    _adapter(tmp_path / "a", b"weights two")
    second = _spec(tmp_path / "a")
    assert second.config_hash() != first.config_hash()
    _adapter(tmp_path / "a", b"weights two", rank=8)
    assert _spec(tmp_path / "a").config_hash() != second.config_hash()

    # The same files elsewhere: the same judge (the contents decide a verdict, not the path).
    moved = _spec(_adapter(tmp_path / "elsewhere", b"weights two", rank=8))
    assert moved.config_hash() == _spec(tmp_path / "a").config_hash()


def test_an_adapter_rewritten_alike_on_disk_is_hashed_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}", encoding="utf-8")
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(b"one")
    first = adapter_sha256(folder)
    # The same size, inode and times: a rewrite within one tick of the clock. A hash is kept
    # only for files that have not changed for a while, so this one is read again.
    stat = weights.stat()
    monkeypatch.setattr("rubricsvc.backends.weights_hash.files_sha256", lambda files: "read again")
    assert adapter_sha256(folder) == "read again" != first
    assert weights.stat().st_ctime_ns == stat.st_ctime_ns


def test_an_adapter_folder_must_hold_an_adapter(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no such folder"):
        _spec(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValidationError, match=r"adapter_config\.json"):
        _spec(tmp_path / "empty")


def test_an_adapter_keeps_its_judge_apart_from_the_base(tmp_path: Path) -> None:
    base = _spec(None, name="base")
    lora = _spec(_adapter(tmp_path / "a", b"weights"))
    # A process sharing one model between configs never serves the adapter's from the base's.
    assert loaded_backend_key(lora) != loaded_backend_key(base)
    # A promotion gate holds for the weights served: the base's label is not the adapter's.
    assert _model_label(base) == "/models/base"
    assert _model_label(lora) == f"/models/base + adapter {lora.adapter_sha256()[:16]}"
    assert len(_model_label(_spec(tmp_path / "a", model="m" * 400))) == 300


def test_a_judge_file_names_its_adapter_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "genrm"
    _adapter(folder / "adapter", b"weights")
    judge = folder / "judge.yaml"
    judge.write_text(
        yaml.safe_dump({"judges": [{"name": "genrm", "adapter": "adapter"}]}), encoding="utf-8"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = Path.cwd()
    os.chdir(elsewhere)  # relative to the file, not to the working folder
    try:
        (spec,) = load_judge_file(Path("..") / "genrm" / "judge.yaml")
    finally:
        os.chdir(cwd)
    assert spec.adapter == str((folder / "adapter").resolve())
    assert spec.model is None  # the embedded model, the base a committed adapter is made on
    assert spec.adapter_sha256() == adapter_sha256(folder / "adapter")


@pytest.mark.parametrize("backend", ["vllm", "openai"])
def test_backends_that_cannot_apply_an_adapter_refuse_it(tmp_path: Path, backend: str) -> None:
    judge = tmp_path / "judge.yaml"
    entry = {"name": "served-elsewhere", "backend": backend, "adapter": "adapter"}
    judge.write_text(yaml.safe_dump(entry), encoding="utf-8")
    with pytest.raises(ValidationFailed) as refused:
        load_judge_file(judge)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "'served-elsewhere'" in message and f"backend {backend!r} cannot apply" in message

    # Built in code past the spec's checks: refused before any backend is made.
    spec = SimpleNamespace(
        name="served-elsewhere",
        backend=backend,
        model="m",
        backend_options={},
        adapter=str(tmp_path / "adapter"),
    )
    with pytest.raises(ValidationFailed, match="'served-elsewhere' has an adapter"):
        backend_from_spec(spec)


def test_a_jury_takes_no_adapter_of_its_own(tmp_path: Path) -> None:
    member = {"name": "a", "backend": "scripted"}
    with pytest.raises(ValidationError, match="adapter"):
        JudgeSpec.model_validate(
            {"name": "j", "jury": {"members": [member]}, "adapter": str(tmp_path)}
        )
