"""The over-optimization lab's reward shaping and reports: the length penalty, gold scored on
the training completions, `--set` overrides, and report.md / compare.md from run directories.
The scorers here are stand-ins: these tests are about what is done with their results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from tests.requirements import require_module
from trainer.config import LengthPenalty, ScorerSettings, TrainConfig, load_config, parse_override
from trainer.evolution_report import parts_agreement_lines
from trainer.grpo import grpo_arguments
from trainer.monitors import diverging, slope
from trainer.recording import RecordingReward
from trainer.report import compare_runs, group_agreement, read_run, table, write_run_report
from trainer.rewards import RubricReward
from trainer.rundir import ALARMS, GOLD, METRICS, SAMPLES, RunDirectory


class FixedScorer:
    """Gives each completion the reward its text names: "0.25 ..." scores 0.25."""

    def __init__(self, settings: ScorerSettings | None = None, offset: float = 0.0) -> None:
        self.settings = settings or ScorerSettings()
        self.offset = offset
        self.requests: list[RewardRequest] = []

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        self.requests.extend(requests)
        results = []
        for request in requests:
            head = request.completion.split()[0]
            value = None if head == "masked" else float(head) + self.offset
            results.append(RewardResult(value, "ok" if value is not None else "masked", 1.0))
        return results


def test_the_length_penalty_takes_its_share_past_the_bound_and_keeps_masks() -> None:
    shaping = LengthPenalty(max_words=3, per_word=0.1, max_penalty=0.25)
    assert [shaping.penalty(n) for n in (0, 3, 4, 5, 10)] == pytest.approx([0, 0, 0.1, 0.2, 0.25])
    settings = ScorerSettings(length_penalty=shaping)
    reward = RubricReward(scorer=FixedScorer(settings))
    logged: dict[str, float] = {}
    completions = ["0.5 two", "0.5 a b c d", "masked a b c d e f", "0.9 a b c d e f g h"]
    rewards = reward(["p"] * 4, completions, log_metric=logged.__setitem__)
    assert rewards == pytest.approx([0.5, 0.3, None, 0.65])
    assert logged["rubric/length_penalty"] == pytest.approx((0 + 0.2 + 0.25 + 0.25) / 4)
    # The judge's own score is what rubric/reward logs: the penalty is the trainer's.
    assert logged["rubric/reward"] == pytest.approx((0.5 + 0.5 + 0.9) / 3)


def test_without_a_length_penalty_the_rewards_are_the_scores() -> None:
    reward = RubricReward(scorer=FixedScorer())
    assert reward(["p"] * 2, ["0.5 a b c d e f g h i j", "0.2"]) == pytest.approx([0.5, 0.2])


def test_the_training_completions_are_scored_by_gold_each_step(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    proxy, gold = FixedScorer(), FixedScorer(offset=-0.1)
    recording = RecordingReward(RubricReward(scorer=proxy), run, gold=gold, gold_every=2)
    logged: dict[str, float] = {}
    for step in (0, 1):  # TRL's global step before the update: steps 1 and 2
        recording(
            ["p", "q"],
            ["0.6 x", "0.4 y"],
            prompt_id=["p1", "p2"],
            log_metric=logged.__setitem__,
            trainer_state=type("State", (), {"global_step": step})(),
        )
    # Gold scored only on step 2 (every 2 steps), the same completions with their prompt ids.
    assert [r.prompt_id for r in gold.requests] == ["p1", "p2"]
    assert logged["gold/train_reward"] == pytest.approx(0.4)
    samples = run.read(SAMPLES)
    assert [s.get("gold_reward") for s in samples] == pytest.approx([None, None, 0.5, 0.3])
    assert [s["rubric_reward"] for s in samples] == [0.6, 0.4, 0.6, 0.4]


def test_set_overrides_reach_into_sections_with_yaml_values(tmp_path: Path) -> None:
    config_file = tmp_path / "train.yaml"
    config_file.write_text("prompts: [a]\nreward: {judge: embedded}\n", encoding="utf-8")
    overrides = dict(
        parse_override(text)
        for text in (
            "reward.criterion_dropout=0.5",
            "reward.mode=null",
            "grpo.seed=3",
            "group=baseline",
            'reward.rubric="{prompt_id}/proxy"',
        )
    )
    config = load_config(config_file, overrides)
    assert config.reward.criterion_dropout == 0.5
    assert config.reward.mode is None
    assert config.reward.rubric == "{prompt_id}/proxy"
    assert config.grpo.seed == 3
    assert config.group_name == "baseline"
    with pytest.raises(ValidationFailed, match="KEY=VALUE"):
        parse_override("grpo.seed")
    with pytest.raises(ValidationFailed, match="'prompts' is not a mapping"):
        load_config(config_file, {"prompts.x": 1})
    with pytest.raises(ValidationFailed, match="criterion_dropout"):
        load_config(config_file, {"reward.criterion_dropout": 1.5})


def fake_run(
    root: Path,
    name: str,
    group: str,
    seed: int,
    held_out: list[tuple[int, float, float]],
    alarms: Sequence[int] = (),
) -> Path:
    """A run directory as a run leaves it: config, metrics, gold evaluations, alarms."""
    run = RunDirectory(root / name)
    config = {
        "name": name,
        "group": group,
        "reward": {"judge": "embedded", "criterion_dropout": 0.5 if "drop" in group else 0.0},
        "grpo": {"seed": seed, "beta": 0.0, "max_steps": 10},
        "random_rewards": group == "control",
    }
    run.write_config(config, {})
    for step in range(1, 11):
        run.append(METRICS, {"step": step, "rubric/reward": step / 10, "gold/train_reward": 0.5})
    for step, proxy, gold in held_out:
        run.append(GOLD, {"step": step, "train_score": proxy, "gold_score": gold})
    for step in alarms:
        run.append(ALARMS, {"step": step, "kind": "gold_divergence", "message": "diverging"})
    run.append(SAMPLES, {"step": 1, "prompt_id": "p", "completion": "first words", "reward": 0.1})
    run.append(SAMPLES, {"step": 10, "prompt_id": "p", "completion": "last words", "reward": 0.9})
    return run.path


def test_a_run_report_gives_held_out_start_peak_and_end(tmp_path: Path) -> None:
    path = fake_run(
        tmp_path, "base-s0", "base", 0, [(0, 0.2, 0.5), (5, 0.6, 0.4), (10, 0.5, 0.3)], [10]
    )
    curves, report = write_run_report(path)
    assert curves.stat().st_size > 10_000  # a drawn PNG
    text = report.read_text(encoding="utf-8")
    assert "| start | 0 | 0.200 | 0.500 |" in text
    assert "| proxy's peak | 5 | 0.600 | 0.400 |" in text
    assert "| end | 10 | 0.500 | 0.300 |" in text
    assert "| proxy | 0.300 | 0.800 |" in text  # training: first and last five steps
    assert "step 10: gold_divergence" in text
    assert "first words" in text and "last words" in text


def test_compare_averages_a_groups_seeds_and_counts_them(tmp_path: Path) -> None:
    paths = [
        fake_run(tmp_path, "base-s0", "base", 0, [(0, 0.2, 0.5), (5, 0.6, 0.4), (10, 0.5, 0.3)]),
        fake_run(tmp_path, "base-s1", "base", 1, [(0, 0.2, 0.5), (5, 0.4, 0.6), (10, 0.7, 0.1)]),
        fake_run(tmp_path, "drop-s0", "drop", 0, [(0, 0.2, 0.5), (10, 0.3, 0.5)], [10]),
    ]
    curves, document, text = compare_runs(paths, tmp_path / "compare")
    assert curves.is_file() and document.is_file()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    assert set(rows) == {"base", "drop"}
    # base: seed 0 peaks at step 5 (0.6, gold 0.4), seed 1 at step 10 (0.7, gold 0.1).
    assert "| base | 2 | embedded | none |" in rows["base"]
    assert "0.650 [0.600, 0.700]" in rows["base"]  # proxy at the peak
    assert "0.250 [0.100, 0.400]" in rows["base"]  # gold at the peak
    assert "| drop | 1 | embedded | criterion dropout 0.5 |" in rows["drop"]
    # No answer was logged with both scores: nothing for the monitor's test to decide on
    # (the alarm a run logged is not what the column counts), and no group agreement.
    assert rows["drop"].endswith("| 0 in 0 of 1 run(s) | - | - |")
    assert rows["base"].endswith("| 0 in 0 of 2 run(s) | -, - | - |")
    assert table([read_run(paths[0])]).count("\n") == 2  # header, rule, one row


def _sample(step: int, prompt: str, proxy: float, gold: float | None) -> dict[str, object]:
    return {"step": step, "prompt_id": prompt, "rubric_reward": proxy, "gold_reward": gold}


def test_group_agreement_counts_pairs_within_a_group_that_gold_tells_apart() -> None:
    samples = [
        # Step 1, prompt a: gold orders c > b > a; the proxy agrees on (a, c) and (b, c),
        # and has (a, b) the wrong way round.
        _sample(1, "a", 0.2, 0.0),
        _sample(1, "a", 0.1, 0.5),
        _sample(1, "a", 0.9, 1.0),
        # Step 1, prompt b: gold ties (no pair), one sample without gold (left out).
        _sample(1, "b", 0.3, 0.5),
        _sample(1, "b", 0.7, 0.5),
        _sample(1, "b", 0.8, None),
        # Step 2, prompt a: the proxy ties where gold does not: half credit. Across groups
        # (0.9 at step 1 against 0.0 here) nothing is compared.
        _sample(2, "a", 0.4, 0.0),
        _sample(2, "a", 0.4, 1.0),
    ]
    found = group_agreement(samples)
    assert (found.pairs, found.groups) == (4, 2)
    assert found.agreement == pytest.approx((1 + 1 + 0 + 0.5) / 4)
    assert found.interval is not None
    low, high = found.interval
    assert 0.0 <= low <= found.agreement <= high <= 1.0
    empty = group_agreement([_sample(1, "a", 0.2, 0.5), _sample(1, "a", 0.9, 0.5)])
    assert (empty.pairs, empty.agreement, empty.interval) == (0, None, None)


@pytest.mark.parametrize("window", [2, 3])
def test_the_alarm_margin_is_the_threshold_below_which_the_monitor_fires(
    tmp_path: Path, window: int
) -> None:
    """The margin read from the recorded evaluations is where the monitor's own rule
    (``diverging`` on the evaluations so far) stops firing."""
    held_out = [
        (0, 0.20, 0.50),
        (5, 0.22, 0.48),
        (10, 0.21, 0.52),
        (15, 0.26, 0.40),
        (20, 0.30, 0.35),
        (25, 0.29, 0.36),
    ]
    path = fake_run(tmp_path, "run", "base", 0, held_out)
    run = read_run(path)
    run.config["monitors"] = {"gold": {"window": window}}
    found = run.alarm_margin()
    assert found is not None
    margin, step = found
    proxy, gold = [p for _, p, _ in held_out], [g for _, _, g in held_out]

    def fires(threshold: float) -> list[int]:
        return [
            held_out[end - 1][0]
            for end in range(1, len(held_out) + 1)
            if diverging(proxy[:end], gold[:end], window, threshold)
        ]

    assert step in fires(margin * 0.999)
    assert fires(margin * 1.001) == []
    assert fires(0.0) and margin == pytest.approx(
        max(
            min(slope(proxy[e - window : e]), -slope(gold[e - window : e]))
            for e in range(window, len(held_out) + 1)
        )
    )
    flat = read_run(fake_run(tmp_path, "flat", "base", 0, [(0, 0.2, 0.5), (5, 0.2, 0.4)]))
    assert flat.alarm_margin() is None  # the proxy did not rise: no threshold fires


def test_a_completion_holding_a_unicode_line_separator_is_read_back_whole(
    tmp_path: Path,
) -> None:
    """A policy's sample may hold U+2028 (written raw in JSON): the run's logs still read, and
    its report is written."""
    path = fake_run(tmp_path, "run", "base", 0, [(0, 0.2, 0.5), (5, 0.3, 0.4)])
    odd = "first\u2028second\x85third\u2029"
    RunDirectory(path).append(SAMPLES, {"step": 10, "prompt_id": "p", "completion": odd})
    assert read_run(path).samples[-1]["completion"] == odd
    _, report = write_run_report(path)
    assert "first second third" in report.read_text(encoding="utf-8")  # quoted on one line


def test_a_folder_that_is_no_run_is_named(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="not a run directory"):
        read_run(tmp_path)


def test_a_run_without_gold_reports_so(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "plain")
    run.write_config({"name": "plain", "grpo": {"seed": 0}}, {})
    run.append(METRICS, {"step": 1, "rubric/reward": 0.5})
    _, report = write_run_report(run.path)
    assert "No held-out evaluation" in report.read_text(encoding="utf-8")


def test_train_report_and_compare_on_the_command_line(tmp_path: Path) -> None:
    from tests.cli_runner import cli_error, cli_ok

    database = f"sqlite:///{tmp_path / 'unused.sqlite'}"
    first = fake_run(tmp_path, "a-s0", "a", 0, [(0, 0.2, 0.5), (10, 0.6, 0.2)], [10])
    second = fake_run(tmp_path, "b-s0", "b", 0, [(0, 0.2, 0.5), (10, 0.3, 0.5)])
    result = cli_ok("train", "report", str(first), database_url=database)
    assert (first / "report.md").is_file() and "report.md" in result.stdout
    output = tmp_path / "both"
    result = cli_ok(
        "train", "compare", str(first), str(second), "--output", str(output), database_url=database
    )
    assert "| a | 1 | embedded | none | 0.200 / 0.600 / 0.600 |" in result.stdout
    assert (output / "curves.png").is_file() and (output / "compare.md").is_file()
    assert "not a run directory" in cli_error(
        "train", "compare", str(tmp_path), database_url=database
    )
    # `train CONFIG` is still `train run CONFIG`: a missing file is named as the config.
    assert "missing.yaml" in cli_error(
        "train", str(tmp_path / "missing.yaml"), database_url=database
    )


def test_grpo_trains_in_bfloat16_and_checkpoints_gradients_only_on_a_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """bfloat16 only on a GPU that has it; gradient checkpointing (memory for compute) only
    on a GPU: on CPU neither pays."""
    torch = require_module("torch", "trainer")

    def device() -> tuple[bool, bool, bool]:
        arguments = grpo_arguments(TrainConfig(prompts=["p"]), tmp_path)
        return arguments["use_cpu"], arguments["bf16"], arguments["gradient_checkpointing"]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device() == (True, False, False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert device() == (False, True, True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert device() == (False, False, True)


def test_compare_sums_an_evolving_runs_evolution_metrics(tmp_path: Path) -> None:
    """Two steps evolved 2 prompts each: 3 + 1 added, 0 + 2 pruned, 1 refused, 1 failure of
    4 calls; 5 criteria active at the end; the parts' means (0.4 + 0.6) / 2 and 0.5."""
    path = fake_run(tmp_path, "evo-s0", "evo", 0, [(0, 0.2, 0.5), (10, 0.3, 0.5)])
    run = RunDirectory(path)
    for step, (new, pruned, refused, failed, active, persistent) in enumerate(
        [(3, 0, 0, 1, 3, 0.4), (1, 2, 1, 0, 5, 0.6)], start=11
    ):
        run.append(
            METRICS,
            {
                "step": step,
                "evolution/prompts": 2,
                "evolution/new": new,
                "evolution/pruned": pruned,
                "evolution/refused": refused,
                "evolution/generator_failures": failed,
                "evolution/active": active,
                "evolution/persistent_reward": persistent,
                "evolution/evolved_reward": 0.5,
            },
        )
    _, document, _ = compare_runs([path], tmp_path / "compare")
    text = document.read_text(encoding="utf-8")
    assert "## Evolving rubrics" in text
    assert "| evo-s0 | 2 | 5 | 4 | 2 | 1 | 1 of 4 | 0.500 | 0.500 | - |" in text
    # A run that did not evolve has no such section.
    plain = fake_run(tmp_path, "base-s0", "base", 0, [(0, 0.2, 0.5)])
    _, document, _ = compare_runs([plain], tmp_path / "plain")
    assert "Evolving rubrics" not in document.read_text(encoding="utf-8")


def test_an_evolving_run_names_its_generator_among_its_defences() -> None:
    from trainer.report import defences

    evolving = {"reward": {"evolution": {"generator": {"backend": "overopt-pool"}, "every": 1}}}
    assert defences(evolving) == "evolving rubrics (generator overopt-pool, every 1, max_active 5)"
    assert defences({"reward": {"evolution": {}}}) == "none"  # no evolution configured


def test_an_evolving_runs_reward_parts_each_get_their_agreement_with_gold() -> None:
    """One group, gold orders c > b > a. The reward agrees on all 3 pairs (1.0); the
    persistent part on none (0.0); the evolved part ties (a, b) and agrees on the other two:
    (0.5 + 1 + 1) / 3. A run whose samples hold no parts gets no table."""
    gold = [0.0, 0.5, 1.0]
    reward, persistent, evolved = [0.1, 0.2, 0.3], [0.3, 0.2, 0.1], [0.5, 0.5, 0.9]
    samples = [
        _sample(1, "a", r, g) | {"persistent_reward": p, "evolved_reward": e}
        for r, p, e, g in zip(reward, persistent, evolved, gold, strict=True)
    ]
    assert group_agreement(samples, "persistent_reward").agreement == 0.0
    assert group_agreement(samples, "evolved_reward").agreement == pytest.approx(2.5 / 3)
    lines = parts_agreement_lines([("ev", samples), ("plain", [_sample(1, "a", 0.1, 0.0)])])
    rows = [line for line in lines if line.startswith("| ev |")]
    assert len(rows) == 1 and not any(line.startswith("| plain |") for line in lines)
    assert rows[0].startswith("| ev | 1.00 [") and "| 0.00 [" in rows[0]
    assert "| 0.83 [" in rows[0] and rows[0].endswith("(3 pairs) |")


def test_a_run_rewarded_by_golds_own_rubric_is_named_the_oracle() -> None:
    from trainer.report import defences

    gold = {"gold": {"scorer": {"judge": "embedded", "rubric": "{prompt_id}/gold"}}}
    oracle = {"reward": {"rubric": "{prompt_id}/gold"}, "monitors": gold}
    assert defences(oracle) == "gold's rubric as the reward (oracle)"
    proxy = {"reward": {"rubric": "{prompt_id}/proxy"}, "monitors": gold}
    assert defences(proxy) == "none"
