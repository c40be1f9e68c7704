"""``rubricsvc judges reinforce``: RL (GRPO on TRL) on a distilled LoRA judge, from its SFT
adapter, on the SFT judge's own data and split, registered with its lineage and gated against
the SFT judge. The judges are the tiny judge of the embedded model's architecture and
tokenizer (tests/tiny_model.py) with a small adapter: the command's plumbing is under test,
not what RL teaches (two steps)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.models import JudgeConfig, JudgeGate, JudgeGateStatus
from rubricsvc.scoring.judge_configs import latest_judge_config, stored_spec
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database
from tests.requirements import require_module
from tests.tiny_model import tiny_judge_dir

SAMPLE = Path(__file__).resolve().parents[1] / "data/healthbench_m42_sample/data/sample"
# Short conversations with few criteria (25 verdicts on 6 prompts), as test_distillation's.
RECORDS = (60, 21, 31, 85, 2, 87)
SFT = {
    "max_steps": 2,
    "gradient_accumulation_steps": 1,
    "max_length": 4096,
    "learning_rate": 1e-4,
    "lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]},
    "min_agreement": 0.0,
}
# Two optimizer steps of two groups of eight sampled verdicts each. The tiny judge says a digit
# (no verdict) more often than Yes or No on these prompts, and never the labelled verdict in the
# first groups drawn: charged -1, a digit is worse than a wrong verdict, so the groups' rewards
# differ and the adapter gets a gradient. The learning rate is high so that two steps move it.
RL = {
    "max_steps": 2,
    "unparseable_reward": -1.0,
    "num_generations": 8,
    "labels_per_step": 2,
    "learning_rate": 1e-2,
    "max_length": 4096,
    "logging_steps": 1,
    "min_agreement": 0.0,
}


def _import(tmp_path: Path, database_url: str) -> None:
    lines = (SAMPLE / "judge_responses.jsonl").read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "judge_responses.jsonl"
    subset.write_text("\n".join(lines[i] for i in RECORDS) + "\n", encoding="utf-8")
    cli_ok("db", "upgrade", database_url=database_url)
    cli_ok("labels", "import", "healthbench", str(subset), database_url=database_url)


def _config(path: Path, settings: dict[str, Any]) -> Path:
    path.write_text(json.dumps(settings), encoding="utf-8")
    return path


def _adapter_tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.mark.model
@pytest.mark.slow(seconds=30)
def test_rl_trains_the_sft_adapter_records_the_run_and_gates_it_against_the_sft_judge(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("peft", "trainer")
    _import(tmp_path, sqlite_url)
    sft_dir = tmp_path / "sft"
    sft = cli_ok(
        "judges", "distill", "--teacher", "imported", "--base", str(tiny_judge_dir()),
        "--into", "tiny-sft", "--split", "prompt:0.5",
        "--config", str(_config(tmp_path / "sft.json", SFT)), "--run-dir", str(sft_dir),
        "--json", database_url=sqlite_url, timeout=900,
    ).json()  # fmt: skip
    rl_dir = tmp_path / "rl"
    report = cli_ok(
        "judges", "reinforce", "--judge", "tiny-sft", "--into", "tiny-rl",
        "--config", str(_config(tmp_path / "rl.json", RL)), "--run-dir", str(rl_dir),
        "--json", database_url=sqlite_url, timeout=900,
    ).json()  # fmt: skip

    # The SFT judge's data and split: the same targets on each side, so the RL judge is gated
    # on the prompts the SFT judge's gate held out.
    assert report["same_data_as_started_from"] is True
    assert report["data_snapshot"] == sft["data_snapshot"]
    assert report["split"] == sft["split"]
    assert report["gate"]["label_set_hash"] == sft["gate"]["label_set_hash"]

    # The record: settings, metrics with the reward by step, the adapter alone.
    training = report["training"]
    assert training["steps"] == 2 and training["examples"] == report["split"]["train_targets"]
    for name in ("run.json", "examples.jsonl", "metrics.jsonl", "training.json", "reward.png"):
        assert (rl_dir / name).is_file(), name
    run = json.loads((rl_dir / "run.json").read_text(encoding="utf-8"))
    assert run["method"] == "grpo" and run["settings"]["num_generations"] == 8
    assert run["started_from"]["config_hash"] == sft["config_hash"]
    logged = [json.loads(line) for line in (rl_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in logged if "reward" in line]
    assert [line["step"] for line in steps] == [1, 2]
    for line in steps:
        assert -1.0 <= line["reward"] <= 1.0 and 0.0 <= line["verdicts/unparseable"] <= 1.0
        assert line["completions/mean_length"] == 1.0  # the verdict token alone
    assert training["first_reward"] == steps[0]["reward"]

    # Trained from the SFT adapter, and changed by it.
    before, after = _adapter_tensors(sft_dir / "model"), _adapter_tensors(rl_dir / "model")
    assert before.keys() == after.keys()
    assert any(not before[k].equal(after[k]) for k in before)

    # Registered as the SFT judge's spec with the new adapter: another config hash.
    def stored(session):  # type: ignore[no-untyped-def]
        rl, start = (
            latest_judge_config(session, "tiny-rl"),
            latest_judge_config(session, "tiny-sft"),
        )
        gates = session.scalars(
            select(JudgeGate.status)
            .where(JudgeGate.judge_config_id == rl.id)
            .order_by(JudgeGate.id)
        )
        return rl, start, list(gates)

    rl_row, sft_row, gates = read_database(sqlite_url, stored)
    rl_spec, sft_spec = stored_spec(rl_row), stored_spec(sft_row)
    assert rl_row.config_hash == report["config_hash"] != sft_row.config_hash
    assert rl_spec.adapter == str((rl_dir / "model").resolve())
    assert (rl_spec.model, rl_spec.revision, rl_spec.mode) == (
        sft_spec.model,
        sft_spec.revision,
        sft_spec.mode,
    )
    assert rl_spec.adapter_sha256() != sft_spec.adapter_sha256()
    lineage = rl_row.settings["origin"]["reinforced"]
    assert lineage["started_from"]["adapter_sha256"] == sft_spec.adapter_sha256()
    assert lineage["adapter"]["sha256"] == rl_spec.adapter_sha256()

    # The gate: the SFT judge in the base's place, both judging every held-out label.
    gate = report["gate"]
    assert gate["base"]["config_hash"] == sft_row.config_hash
    assert gate["student"]["config_hash"] == rl_row.config_hash
    for role in ("base", "student"):
        assert gate[role]["n_judged"] == gate[role]["n_labelled"] == report["split"]["test_targets"]
    assert gates[0] == JudgeGateStatus.CANDIDATE and gates[-1].value == report["status"]
    assert gate["gain_ci"] is not None
    if report["status"] == "rejected":
        assert any("gain over tiny-sft, the judge it started from" in r for r in gate["reasons"])

    # The plain output names the judges' roles and the gain over the SFT judge.
    again = cli_ok(
        "judges", "reinforce", "--judge", "tiny-sft", "--into", "tiny-rl",
        "--config", str(tmp_path / "rl.json"), "--run-dir", str(rl_dir),
        database_url=sqlite_url, timeout=900,
    ).stdout  # fmt: skip
    assert "from tiny-sft" in again and "gain over tiny-sft:" in again


@pytest.mark.model
@pytest.mark.slow(seconds=15)
def test_a_judge_from_a_file_is_trained_on_the_labels_and_split_named(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A judge registered from its file has no distillation record: RL takes the data and split
    it is given, and says it cannot tell whether they are the judge's."""
    require_module("peft", "trainer")
    import peft
    import transformers

    _import(tmp_path, sqlite_url)
    base = tiny_judge_dir()
    adapter = tmp_path / "adapter"
    config = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft.get_peft_model(
        transformers.AutoModelForCausalLM.from_pretrained(base), config
    ).save_pretrained(adapter)
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        f"judges:\n  - {{name: filed, backend: transformers, model: {base}, adapter: adapter}}\n",
        encoding="utf-8",
    )
    cli_ok("judges", "add", str(judges), database_url=sqlite_url)
    assert "give --labels SET or --teacher JUDGE" in cli_error(
        "judges", "reinforce", "--judge", "filed", "--into", "filed-rl",
        "--run-dir", str(tmp_path / "run"), database_url=sqlite_url,
    )  # fmt: skip
    settings = {**RL, "max_steps": 1}
    report = cli_ok(
        "judges", "reinforce", "--judge", "filed", "--into", "filed-rl",
        "--teacher", "imported", "--split", "prompt:0.5",
        "--config", str(_config(tmp_path / "rl.json", settings)),
        "--run-dir", str(tmp_path / "run"), "--json", database_url=sqlite_url, timeout=900,
    ).json()  # fmt: skip
    assert report["same_data_as_started_from"] is None
    assert report["split"]["train_share"] == 0.5 and report["split"]["seed"] == 0
    assert report["source"]["name"] == "imported" and report["training"]["steps"] == 1
    assert report["started_from"]["data_snapshot"] is None


@pytest.mark.model
def test_a_judge_rl_cannot_train_is_refused_in_one_line(sqlite_url: str, tmp_path: Path) -> None:
    require_module("peft", "trainer")
    _import(tmp_path, sqlite_url)
    base = tiny_judge_dir()
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        "judges:\n"
        f"  - {{name: plain, backend: transformers, model: {base}}}\n"
        f"  - {{name: texty, backend: transformers, mode: criterion-text, model: {base}}}\n",
        encoding="utf-8",
    )
    cli_ok("judges", "add", str(judges), database_url=sqlite_url)

    def refused(*options: str) -> str:
        error = cli_error(
            "judges", "reinforce", *options, "--run-dir", str(tmp_path / "run"),
            database_url=sqlite_url,
        )  # fmt: skip
        assert len(error.splitlines()) == 1, error
        return error

    assert "no LoRA adapter" in refused("--judge", "plain", "--into", "rl", "--labels", "x")
    assert "criterion-text judge" in refused("--judge", "texty", "--into", "rl")
    assert "no stored judge" in refused("--judge", "missing", "--into", "rl")
    assert "names an existing judge" in refused("--judge", "plain", "--into", "texty")
    assert "built-in judge" in refused("--judge", "plain", "--into", "embedded")
    names = read_database(sqlite_url, lambda s: set(s.scalars(select(JudgeConfig.name))))
    assert "rl" not in names and not (tmp_path / "run").exists()


@pytest.mark.model
def test_one_pass_per_prompt_gives_trls_log_probabilities_entropies_and_gradients() -> None:
    """``shared_prompt_logps`` (one forward pass per distinct prompt) against TRL's own
    ``_get_per_token_logps_and_entropies`` (one per sample), on left-padded groups with
    different sampled tokens: the same values and the same gradient on the adapter."""
    require_module("peft", "trainer")
    import peft
    import torch
    import transformers
    from trl import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head

    from rubricsvc.distill.grpo import shared_prompt_logps

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_judge_dir())
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    config = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(model, config)
    model.eval()  # no dropout: both computations see the same weights
    pad = 0
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]  # the second left-padded to the first's width
    tokens = [[30, 31, 32], [40, 30, 41]]  # three samples each, one repeated token
    rows, masks = [], []
    for prompt, sampled in zip(prompts, tokens, strict=True):
        padding = len(prompts[0]) - len(prompt)
        for token in sampled:
            rows.append([pad] * padding + prompt + [token])
            masks.append([0] * padding + [1] * (len(prompt) + 1))
    input_ids, attention_mask = torch.tensor(rows), torch.tensor(masks)

    class Trainer:  # what TRL's method reads of its trainer: no mixed precision on a CPU
        accelerator = type(
            "Accelerator", (), {"autocast": staticmethod(nullcontext), "is_main_process": True}
        )

    def gradients(logps: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        (logps.squeeze(1) * torch.arange(1.0, 7.0)).sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.requires_grad]

    trl_logps, trl_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(
        Trainer(), model, input_ids, attention_mask, 1, compute_entropy=True
    )
    trl_grads = gradients(trl_logps)
    ours, entropy = shared_prompt_logps(model, input_ids, attention_mask, 0.7, True, torch)
    our_grads = gradients(ours)
    assert ours.shape == trl_logps.shape == (6, 1)
    assert torch.allclose(ours, trl_logps, atol=1e-5)
    assert torch.allclose(entropy, trl_entropy, atol=1e-5)
    for mine, theirs in zip(our_grads, trl_grads, strict=True):
        # Float sums reordered: the error of a gradient entry scales with the tensor's largest
        # entries (the terms summed into it), not with the entry itself. Measured on an Intel
        # Xeon at 3-5e-6 of each tensor's largest entry, where an element-wise rtol failed
        # (0.002 off an entry under 19 in a tensor reaching 532); a wrong term or a missing
        # one would be off by the order of the entries themselves.
        scale = theirs.abs().max().item()
        assert (mine - theirs).abs().max().item() <= 1e-4 * scale + 1e-6
    assert len(set(ours.squeeze(1).tolist())) > 2  # the tokens' log-probabilities differ
