"""``rubricsvc train sft``: the supervised warm start on TRL's SFTTrainer, end to end on CPU,
on the rows ``completions export-sft`` writes from a store (a plain answer and an agent's
trajectory), with the tiny policy (tests/tiny_model.py): the test is about the run (its
records, that it learns, that it re-runs to the digit), not what the policy says."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rubricsvc.distill.training import LLAMA_PROJECTIONS
from tests.cli_runner import cli_ok, run_cli
from tests.integration.test_sft_export import _seeded
from tests.requirements import require_module
from tests.tiny_model import tiny_model_dir

pytestmark = [pytest.mark.model]

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "deepresearch" / "corpus.jsonl"
STEPS = 4


def _weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for path in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(path)))
    return weights


def _train_sft(tmp_path: Path, config: dict[str, Any], database_url: str) -> tuple[Path, str]:
    """``config`` written to TMP/sft.yaml and ``train sft`` run on it (it must succeed): the
    file, and what the command printed with its lines joined."""
    config_file = tmp_path / "sft.yaml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run_cli("train", "sft", str(config_file), database_url=database_url, timeout=900)
    assert result.code == 0, result.stderr[-3000:]
    return config_file, " ".join(result.stdout.split())


@pytest.mark.slow(seconds=60)
def test_a_warm_start_on_an_exported_set_learns_records_and_reruns(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    _seeded(sqlite_url, tmp_path)
    data = tmp_path / "sft.jsonl"
    cli_ok(
        "completions", "export-sft", "--judge", "scripted", "--best", "2", "-o", str(data),
        database_url=sqlite_url,
    )  # fmt: skip
    policy = tiny_model_dir()
    config = {
        "name": "warm",
        "policy": str(policy),
        "data": data.name,  # relative to the config file
        "environment": "deepresearch",  # the tools' schemas in every prompt, as GRPO's
        "agent": {"options": {"corpus": str(CORPUS)}},
        # A high rate on a tiny model: the loss must visibly fall within a few steps.
        "sft": {"max_steps": STEPS, "per_device_train_batch_size": 4, "learning_rate": 5e-3},
        "output_dir": "runs",
        "threads": 1,
    }
    config_file, said = _train_sft(tmp_path, config, sqlite_url)
    assert "4 row(s) to train on, 0 left out" in said
    run = tmp_path / "runs" / "warm"

    recorded = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["data_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert recorded["sft"]["seed"] == 0 and recorded["sft"]["assistant_only_loss"] is True
    args = json.loads((run / "sft_args.json").read_text(encoding="utf-8"))
    assert args["max_steps"] == STEPS and args["seed"] == 0
    record = json.loads((run / "data.json").read_text(encoding="utf-8"))
    assert record["rows"] == 4 and record["environment_tools"] == ["open", "search"]
    assert record["training_chat_template"] == "the tool format's training variant"
    assert (run / "environment.json").exists() and (run / "plots" / "loss.png").exists()

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert metrics[-1]["loss"] < metrics[0]["loss"], [m["loss"] for m in metrics]

    # The policy changed, and it is a model folder with the policy's own tokenizer.
    before, after = _weights(policy), _weights(run / "policy")
    assert set(before) == set(after)
    assert any(not bool((after[k].float() == before[k].float()).all()) for k in before)
    saved = (run / "policy" / "chat_template.jinja").read_text(encoding="utf-8")
    assert saved == (policy / "chat_template.jinja").read_text(encoding="utf-8")

    # The same config and seed again: the same figures to the digit (times aside).
    again = run_cli(
        "train", "sft", str(config_file), "--name", "again", database_url=sqlite_url, timeout=900
    )
    assert again.code == 0, again.stderr[-3000:]
    diff = run_cli(
        "train", "diff", str(run), str(tmp_path / "runs" / "again"), database_url=sqlite_url
    )
    assert diff.code == 0 and "identical to the digit" in diff.stdout, diff.stdout


def test_a_recorded_config_refuses_other_data(sqlite_url: str, tmp_path: Path) -> None:
    """Before any model is loaded: the data's sha256 the config names must be the file's."""
    data = tmp_path / "rows.jsonl"
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi"}]}
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    config_file = tmp_path / "sft.yaml"
    config_file.write_text(
        yaml.safe_dump({"data": str(data), "data_sha256": "0" * 64, "output_dir": "runs"}),
        encoding="utf-8",
    )
    result = run_cli("train", "sft", str(config_file), database_url=sqlite_url)
    assert result.code == 2
    assert f"its sha256 is {hashlib.sha256(data.read_bytes()).hexdigest()}" in result.stderr
    assert not (tmp_path / "runs" / "sft").exists()  # no run directory left behind


@pytest.mark.slow(seconds=60)
def test_a_lora_warm_start_keeps_its_adapter_and_merge_adapter_makes_the_same_policy(
    sqlite_url: str, tmp_path: Path
) -> None:
    """With ``lora``: only the adapter is trained; RUN/adapter holds it, RUN/policy the base
    with it merged, and ``train merge-adapter`` makes that policy again, weight for weight,
    from the adapter and the base (what a repository keeps instead of the policy)."""
    require_module("trl", "trainer")
    require_module("peft", "trainer")
    data = tmp_path / "rows.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"Count to {n}."},
                      {"role": "assistant", "content": " ".join(map(str, range(1, n + 1)))}]}
        for n in range(2, 6)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    policy = tiny_model_dir()
    config = {
        "name": "lora",
        "policy": str(policy),
        "data": str(data),
        "sft": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 5e-3},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "output_dir": "runs",
        "threads": 1,
    }
    _, said = _train_sft(tmp_path, config, sqlite_url)
    run = tmp_path / "runs" / "lora"
    assert "its LoRA adapter in" in said
    adapter = json.loads((run / "adapter" / "adapter_config.json").read_text(encoding="utf-8"))
    assert (adapter["r"], adapter["lora_alpha"], adapter["peft_type"]) == (4, 8, "LORA")
    recorded = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["lora"]["target_modules"] == list(LLAMA_PROJECTIONS)

    # The merged policy: the base's tensors (no adapter's), some of them moved.
    before, merged = _weights(policy), _weights(run / "policy")
    assert set(merged) == set(before)
    assert any(not bool((merged[k].float() == before[k].float()).all()) for k in before)

    made = tmp_path / "made"
    again = run_cli(
        "train", "merge-adapter", str(run / "adapter"), "--output", str(made),
        "--policy", str(policy), database_url=sqlite_url, timeout=300,
    )  # fmt: skip
    assert again.code == 0, again.stderr[-3000:]
    remade = _weights(made)
    assert set(remade) == set(merged)
    assert all(bool((remade[k] == merged[k]).all()) for k in merged)
    provenance = json.loads((made / "merged_from.json").read_text(encoding="utf-8"))
    assert provenance["base"] == str(policy) and len(provenance["adapter_sha256"]) == 64
    assert (made / "tokenizer_config.json").exists()

    # A folder that is no adapter, and an output that is not empty: refused, nothing written.
    for adapter_dir, output in ((policy, tmp_path / "other"), (run / "adapter", made)):
        refused = run_cli(
            "train", "merge-adapter", str(adapter_dir), "--output", str(output),
            "--policy", str(policy), database_url=sqlite_url,
        )  # fmt: skip
        assert refused.code == 2, refused.stdout + refused.stderr
    assert not (tmp_path / "other").exists()
