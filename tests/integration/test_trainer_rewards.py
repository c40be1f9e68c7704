"""The rubric reward for TRL and the verl and OpenRLHF adapters, on a real migrated SQLite
database. The rubrics are check criteria (computed, no model) except where a test is about a
judge failing, which uses the platform's fault-injecting backend; the model-judged path is
exercised by the GRPO tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.db import make_engine, session_scope
from rubricsvc.errors import RubricsvcError
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from tests.helpers import approve_rubrics, blue_sea_rubric, check_criterion
from tests.requirements import prepared_model_dir, require_module, unavailable
from trainer.adapters.verl import compute_score
from trainer.config import ScorerSettings, ScorerVia
from trainer.rewards import AsyncRubricReward, RubricReward

BLUE: dict[str, Any] = blue_sea_rubric("tr/blue", "tr-sea", max_words=8)
JUDGED: dict[str, Any] = {
    "name": "tr/judged",
    "prompt": {"external_id": "tr-judged", "text": "Describe a storm."},
    "criteria": [{"text": "Mentions the wind", "weight": 1}],
}
FAILING_JUDGE = JudgeSpec(
    name="always-fails",
    backend="faulty",
    mode=VerdictMode.CRITERION_PROB,
    backend_options={"inner": "scripted", "failure_rate": 1.0, "seed": 0},
    retries=0,
    retry_backoff=0,
)
SEA_MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]


def seed(database_url: str, *rubrics: dict[str, Any]) -> None:
    """The rubrics, approved, and the judge that always fails."""
    approve_rubrics(database_url, *rubrics, judges=[FAILING_JUDGE])


@pytest.fixture
def database(sqlite_url: str) -> str:
    seed(sqlite_url, BLUE, JUDGED)
    return sqlite_url


def test_rewards_follow_the_rubric_by_prompt_id_or_by_prompt_hash(database: str) -> None:
    reward = RubricReward(ScorerSettings(database_url=database))
    logged: dict[str, list[float]] = {}
    completions = [
        [{"role": "assistant", "content": "The blue sea."}],  # both criteria: 1.0
        [{"role": "assistant", "content": "The sea is wide and deep and very very old."}],
        [{"role": "assistant", "content": "A blue sea, wide and deep, very very old indeed."}],
    ]
    rewards = reward(
        prompts=[SEA_MESSAGES] * 3,
        completions=completions,
        prompt_id=["tr-sea", "tr-sea", None],  # the third is found by its messages' hash
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
    )
    assert rewards == pytest.approx([1.0, 0.0, 0.75])
    assert logged["criteria/Uses the word blue"] == [pytest.approx(2 / 3)]
    assert logged["criteria/Stays under 8 words"] == [pytest.approx(1 / 3)]
    assert logged["rubric/masked_fraction"] == [0.0]


def test_a_masked_score_is_none_never_zero(database: str) -> None:
    reward = RubricReward(ScorerSettings(database_url=database, judge="always-fails"))
    rewards = reward(
        prompts=[[{"role": "user", "content": "Describe a storm."}], SEA_MESSAGES],
        completions=["The wind howls.", "The blue sea."],
        prompt_id=["tr-judged", "tr-sea"],
    )
    assert rewards == [None, 1.0]
    assert reward.last_results[0].status == "masked"


def test_the_reward_is_picklable_and_async_gives_the_same_rewards(database: str) -> None:
    reward = RubricReward(ScorerSettings(database_url=database))
    args: dict[str, Any] = {
        "prompts": [SEA_MESSAGES] * 2,
        "completions": ["Blue.", "Grey water, cold and wide and very deep indeed."],
        "prompt_id": ["tr-sea", "tr-sea"],
    }
    first = reward(**args)
    copy = pickle.loads(pickle.dumps(reward))
    assert copy(**args) == first == pytest.approx([1.0, 0.0])
    async_reward = pickle.loads(
        pickle.dumps(AsyncRubricReward(ScorerSettings(database_url=database)))
    )
    assert asyncio.run(async_reward(**args)) == first


def test_verl_compute_score_with_verls_signature(database: str) -> None:
    settings = {"database_url": database}  # verl passes custom_reward_function.reward_kwargs
    by_ground_truth = compute_score("rubrics", "The blue sea.", "tr-sea", None, **settings)
    assert by_ground_truth == {
        "score": 1.0,
        "masked": 0.0,
        "masked_fallback": 0.0,
        "coverage": 1.0,
        "group_timed_out": 0.0,
        "failures_infrastructure": 0.0,
        "failures_judge": 0.0,
        "failures_response": 0.0,
    }
    by_extra_info = compute_score(
        data_source="rubrics",
        solution_str="A grey sea.",
        ground_truth="",
        extra_info={"prompt_id": "tr-sea", "index": 0},
        **settings,
    )
    assert by_extra_info["score"] == pytest.approx(0.25)
    by_prompt = compute_score("rubrics", "Blue!", None, {"prompt": SEA_MESSAGES}, **settings)
    assert by_prompt["score"] == 1.0
    masked = compute_score(
        "rubrics", "Wind.", "tr-judged", {}, masked_score=-1.0, judge="always-fails", **settings
    )
    # The judge's failure (a crashing backend: infrastructure) is masked and counted.
    assert masked == {
        "score": -1.0,
        "masked": 1.0,
        "masked_fallback": 0.0,
        "coverage": 0.0,
        "group_timed_out": 0.0,
        "failures_infrastructure": 1.0,
        "failures_judge": 0.0,
        "failures_response": 0.0,
    }


MIXED: dict[str, Any] = {
    "name": "tr/mixed",
    "prompt": {"external_id": "tr-mixed", "text": "Describe a storm at sea."},
    "criteria": [
        check_criterion("Uses the word wind", {"type": "contains", "text": "wind"}),
        {"text": "Describes the sound of the storm", "weight": 1},
    ],
}


def test_verls_masked_score_is_its_prompts_mean_never_a_zero(sqlite_url: str) -> None:
    """A masked score sent to verl moves nothing under group-normalized advantages: it is the
    mean of its prompt's scores under the same judge so far, not 0."""
    seed(sqlite_url, MIXED)
    settings = {"database_url": sqlite_url, "judge": "always-fails"}
    # With half the criteria enough, the judged one failing leaves a partial score: the check's.
    partial = [
        compute_score("s", text, "tr-mixed", {}, min_coverage=0.5, **settings)
        for text in ("The wind howls.", "Rain falls.", "The wind rises.")
    ]
    assert [p["score"] for p in partial] == [1.0, 0.0, 1.0]
    assert [p["masked"] for p in partial] == [0.0] * 3
    masked = compute_score("s", "Thunder.", "tr-mixed", {}, min_coverage=1.0, **settings)
    assert (masked["masked"], masked["masked_fallback"]) == (1.0, 0.0)
    assert masked["score"] == pytest.approx(2 / 3)
    assert masked["failures_infrastructure"] == 1.0
    # Nothing of its prompt scored yet under this judge: the judge's mean over every prompt
    # (here tr-mixed's three scores) stands in, and it says so.
    seed(sqlite_url, JUDGED)
    alone = compute_score("s", "Wind.", "tr-judged", {}, **settings)
    assert (alone["masked"], alone["masked_fallback"]) == (1.0, 1.0)
    assert alone["score"] == pytest.approx(2 / 3)
    # A judge with no score at all: 0.0, said so.
    first = compute_score(
        "s", "Wind.", "tr-judged", {}, **{**settings, "aggregation": "healthbench"}
    )
    assert (first["score"], first["masked"], first["masked_fallback"]) == (0.0, 1.0, 1.0)
    with pytest.raises(RubricsvcError, match="give 'mean' or a number"):
        compute_score("s", "Wind.", "tr-judged", {}, masked_score="median", **settings)


# --- over HTTP: the real API (`rubricsvc serve`) on a free port ------------------------------


def _api_key(database: str, scopes: tuple[str, ...]) -> str:
    from rubricsvc.apikeys import create_key

    engine = make_engine(database)
    with session_scope(engine) as session:
        secret = create_key(session, "trainer", list(scopes)).secret
    engine.dispose()
    return secret


def _start_api(database: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUBRICSVC_DATABASE_URL": database, "RUBRICSVC_BROKER_URL": ""}
    return subprocess.Popen(
        [sys.executable, "-m", "rubricsvc", "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _healthy(base_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(timeout=20)


@contextlib.contextmanager
def running_api(
    database: str,
    monkeypatch: pytest.MonkeyPatch,
    start_timeout: float = 60,
    scopes: tuple[str, ...] = ("score",),
) -> Iterator[str]:
    """`rubricsvc serve` on ``database`` and a free port, its reward key (``scopes``) in the
    environment; its base URL once healthy."""
    require_module("fastapi", "api")
    require_module("uvicorn", "api")
    from tests.servers import free_port

    monkeypatch.setenv("RUBRICSVC_REWARD_API_KEY", _api_key(database, scopes))
    port = free_port()
    server = _start_api(database, port)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while not _healthy(base_url):
            if server.poll() is not None or time.monotonic() > deadline:
                stderr = server.stderr.read().decode() if server.stderr else ""
                raise RuntimeError(f"the API did not start: {stderr}")
            time.sleep(0.3)
        yield base_url
    finally:
        _stop(server)


@pytest.fixture
def api(database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with running_api(database, monkeypatch) as base_url:
        yield base_url


def test_rewards_over_http_match_the_in_process_ones(api: str, database: str) -> None:
    args: dict[str, Any] = {
        "prompts": [SEA_MESSAGES] * 3,
        "completions": ["The blue sea.", "A grey sea, cold and wide and very deep.", "Blue"],
        "prompt_id": ["tr-sea", "tr-sea", None],
    }
    over_http = RubricReward(ScorerSettings(via=ScorerVia.HTTP, base_url=api))(**args)
    in_process = RubricReward(ScorerSettings(database_url=database))(**args)
    assert over_http == in_process == pytest.approx([1.0, 0.0, 1.0])


def test_verl_async_compute_score_over_http_matches_the_in_process_one(
    api: str, database: str
) -> None:
    """Several rollouts awaited at once, as verl's reward loop awaits them, with the keyword
    arguments it adds: the same scores as the plain function in process."""
    from trainer.adapters.verl import compute_score, compute_score_async

    texts = ["The blue sea.", "A grey sea, cold and wide and very deep.", "Blue"]

    async def awaited() -> list[dict[str, Any]]:
        calls = [
            compute_score_async(
                "rubrics",
                text,
                "tr-sea",
                None,
                reward_router_address=None,
                via="http",
                base_url=api,
                max_concurrency=2,
            )
            for text in texts
        ]
        return list(await asyncio.gather(*calls))

    over_http = asyncio.run(awaited())
    in_process = [compute_score("rubrics", t, "tr-sea", None, database_url=database) for t in texts]
    assert [r["score"] for r in over_http] == [r["score"] for r in in_process]
    assert [r["score"] for r in over_http] == pytest.approx([1.0, 0.0, 1.0])


def test_openrlhf_reward_func_with_openrlhfs_signature(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("torch", "transformers")
    from trainer.adapters.openrlhf import reward_func

    monkeypatch.setenv("RUBRICSVC_REWARD_URL", api)
    prompt = "Write one sentence about the sea."
    responses = [" The blue sea.", " A grey sea, cold and wide and very deep."]
    out = reward_func([prompt + r for r in responses], [prompt, prompt], ["tr-sea", "tr-sea"])
    assert out["rewards"].tolist() == pytest.approx([1.0, 0.0])
    assert out["scores"].tolist() == pytest.approx([1.0, 0.0])
    assert out["extra_logs"]["rubric_masked"].tolist() == [0.0, 0.0]
    # A masked score never stops the run: by default it gets the mean of the batch's other
    # rewards (none here: 0.0), so it moves nothing; it is counted in extra_logs.
    monkeypatch.setenv("RUBRICSVC_REWARD_JUDGE", "always-fails")
    storm = "Describe a storm."
    default = reward_func([storm + " Wind."], [storm], ["tr-judged"])
    assert default["rewards"].tolist() == [0.0]
    assert default["extra_logs"]["rubric_masked"].tolist() == [1.0]
    assert default["extra_logs"]["rubric_failures_infrastructure"].tolist() == [1.0]
    monkeypatch.setenv("RUBRICSVC_REWARD_MASKED", "-1")
    masked = reward_func([storm + " Wind."], [storm], ["tr-judged"])
    assert masked["rewards"].tolist() == [-1.0]
    assert masked["extra_logs"]["rubric_masked"].tolist() == [1.0]


OPENRLHF = "openrlhf==0.11.2"  # as the Makefile installs it, without its dependencies


def _openrlhf_agent(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """OpenRLHF's ``openrlhf/utils/agent.py`` (``SingleTurnAgentExecutor``), loaded from its
    file: the package's ``utils/__init__`` imports its training stack (deepspeed, sympy, ...),
    which the reward client needs none of. Its one import from the package, the logger module,
    is loaded from its own file too; nothing of OpenRLHF is replaced."""
    found = importlib.util.find_spec("openrlhf")
    if found is None or not found.submodule_search_locations:
        unavailable(
            f"openrlhf is not installed (`make setup` installs it: pip install --no-deps {OPENRLHF})"
        )
    require_module("aiohttp", "dev")
    utils = Path(next(iter(found.submodule_search_locations))) / "utils"

    def load(name: str, path: Path) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    load("openrlhf.utils.logging_utils", utils / "logging_utils.py")
    return load("openrlhf.utils.agent", utils / "agent.py")


class _Policy:
    """The vLLM engine's place in ``SingleTurnAgentExecutor.execute``: it "generates" the given
    token ids, as a policy that ends its turn does."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids

    async def generate(self, prompt_token_ids: list[int], params: Any, **_: Any) -> Any:
        output = SimpleNamespace(token_ids=self.token_ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def _openrlhf_storm_client(api: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, str]:
    """OpenRLHF's executor posting to ``rubricsvc serve``, the policy's tokenizer, and the
    storm prompt as the executor renders it."""
    require_module("transformers", "transformers")
    from transformers import AutoTokenizer

    agent = _openrlhf_agent(monkeypatch)
    tokenizer = AutoTokenizer.from_pretrained(str(prepared_model_dir()))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Describe a storm."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    url = f"{api}/v1/openrlhf/reward?api_key={os.environ['RUBRICSVC_REWARD_API_KEY']}"
    return agent.SingleTurnAgentExecutor(remote_rm_url=url), tokenizer, prompt


@pytest.mark.model
def test_openrlhfs_own_client_gets_one_reward_with_or_without_the_end_of_turn_token(
    api: str, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenRLHF 0.11's ``SingleTurnAgentExecutor`` decodes prompt and response with
    ``skip_special_tokens=False``, so a response that ends its turn ends in ``<|im_end|>``:
    the server takes it off, and the reward is exactly that of the response without it."""
    from rubricsvc.models import Completion

    executor, tokenizer, prompt = _openrlhf_storm_client(api, monkeypatch)
    response = "The wind howls and the rain beats on the roof."
    ids = tokenizer(text=response, add_special_tokens=False)["input_ids"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    params = SimpleNamespace(max_tokens=64, logprobs=None)

    def reward(token_ids: list[int]) -> Any:
        run = executor.execute(prompt, "tr-judged", params, 512, tokenizer, _Policy(token_ids))
        return asyncio.run(run)

    ended, plain = reward([*ids, end]), reward(ids)
    # What OpenRLHF sent: the decoded query ends in the token in one, not in the other.
    assert tokenizer.decode(ended["observation_tokens"], skip_special_tokens=False).endswith(
        response + "<|im_end|>"
    )
    assert ended["reward"] is not None and ended["extra_logs"]["rubric_masked"] == [0.0]
    assert (ended["reward"], ended["scores"]) == (plain["reward"], plain["scores"])
    # One completion: the same response with or without the token (judged once, then cached).
    engine = make_engine(database)
    with session_scope(engine) as session:
        texts = session.scalars(select(Completion.text).where(Completion.source == "openrlhf"))
        assert list(texts) == [response]
    engine.dispose()


STORMS = [
    "The wind howls and the rain beats on the roof.",
    "Thunder rolls; the wind tears at the trees.",
    "Dark clouds gather over the sea.",
    "A storm.",
    "Rain falls all night, and the wind never stops.",
    "Lightning splits the sky above the town.",
]


def _rewards_in_one_request(api: str, prompt_id: str, texts: list[str]) -> list[float | None]:
    import httpx

    answer = httpx.post(
        f"{api}/v1/rewards",
        json={"items": [{"prompt_id": prompt_id, "completion": t} for t in texts]},
        headers={"Authorization": f"Bearer {os.environ['RUBRICSVC_REWARD_API_KEY']}"},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    rewards: list[float | None] = answer.json()["rewards"]
    return rewards


@pytest.mark.model
def test_verls_reward_loop_loads_and_awaits_the_adapter_against_the_server(api: str) -> None:
    """verl's own loader finds ``compute_score_async`` by file path, as
    ``custom_reward_function`` names it; its reward loop awaits one rollout per call, all at
    once, with the keyword arguments it adds: each gets the reward ``/v1/rewards`` gives."""
    from tests.verl_reward_loop import (
        VERL,
        call_as_naive_reward_manager,
        get_custom_reward_fn,
        verl_import_utils,
    )

    utils = verl_import_utils()
    if utils is None:
        unavailable(
            f"verl is not installed (`make setup` installs its code: pip install --no-deps {VERL})"
        )
    config = {
        "reward": {
            "custom_reward_function": {
                "path": str(Path(__file__).resolve().parents[2] / "trainer/adapters/verl.py"),
                "name": "compute_score_async",
                "reward_kwargs": {"via": "http", "base_url": api},
            }
        }
    }
    compute_score = get_custom_reward_fn(config, utils.load_extern_object)
    assert inspect.iscoroutinefunction(compute_score)  # what NaiveRewardManager checks

    async def all_at_once() -> list[dict[str, Any]]:
        calls = [
            call_as_naive_reward_manager(
                compute_score,
                data_source="rubrics",
                response_str=text,
                ground_truth="tr-judged",
                extra_info={"num_turns": None, "rollout_reward_scores": {}},
                reward_router_address="127.0.0.1:9",  # verl passes its own; never called
            )
            for text in STORMS
        ]
        return list(await asyncio.gather(*calls))

    looped = [result["reward_score"] for result in asyncio.run(all_at_once())]
    direct = _rewards_in_one_request(api, "tr-judged", STORMS)
    assert looped == pytest.approx(direct)
    assert len(set(direct)) > 2  # the rewards tell the rollouts apart: none was mixed up


@pytest.mark.model
def test_openrlhfs_own_client_sending_rollouts_at_once_gets_each_its_reward(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenRLHF's ``SingleTurnAgentExecutor`` sends one request per rollout; several rollouts
    finishing together reach the server together (and are judged together there): each gets
    the reward ``/v1/rewards`` gives its response."""
    executor, tokenizer, prompt = _openrlhf_storm_client(api, monkeypatch)
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def all_at_once() -> list[dict[str, Any]]:
        runs = [
            executor.execute(
                prompt,
                "tr-judged",
                params,
                512,
                tokenizer,
                _Policy([*tokenizer(text=text, add_special_tokens=False)["input_ids"], end]),
            )
            for text in STORMS
        ]
        return list(await asyncio.gather(*runs))

    # Its reward is the list the server answered for its one query.
    sent = [result["reward"][0] for result in asyncio.run(all_at_once())]
    direct = _rewards_in_one_request(api, "tr-judged", STORMS)
    assert sent == pytest.approx(direct)
    assert len(set(direct)) > 2


def test_http_rewards_wait_for_a_server_that_is_still_starting(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_module("fastapi", "api")
    require_module("uvicorn", "api")
    from tests.servers import free_port

    monkeypatch.setenv("RUBRICSVC_REWARD_API_KEY", _api_key(database, ("score",)))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    settings = ScorerSettings(via=ScorerVia.HTTP, base_url=base_url, retries=7, retry_backoff=0.25)
    server = _start_api(database, port)
    try:
        assert not _healthy(base_url)  # the first attempt below is refused
        rewards = RubricReward(settings)(
            prompts=[SEA_MESSAGES], completions=["The blue sea."], prompt_id=["tr-sea"]
        )
    finally:
        _stop(server)
    assert rewards == [1.0]


def test_an_unreachable_api_is_one_clear_error_after_the_retries(database: str) -> None:
    from tests.servers import free_port

    base_url = f"http://127.0.0.1:{free_port()}"
    settings = ScorerSettings(via=ScorerVia.HTTP, base_url=base_url, retries=1, retry_backoff=0)
    with pytest.raises(RubricsvcError) as raised:
        RubricReward(settings)(prompts=[SEA_MESSAGES], completions=["x"], prompt_id=["tr-sea"])
    message = str(raised.value)
    assert message.startswith(f"POST {base_url}/v1/rewards: ConnectError")
    assert "\n" not in message


# --- group mode: each prompt's completions of a step are judged together --------------------

CALM: dict[str, Any] = {
    "name": "tr/calm",
    "prompt": {"external_id": "tr-calm", "text": "Describe a calm morning."},
    "criteria": [{"text": "Mentions the light", "weight": 1}],
}
# A GRPO step as TRL hands it over: 2 prompts x 4 generations, each prompt's together.
GROUP_STEP: dict[str, list[str]] = {
    "tr-judged": [
        "The wind howls and rain lashes the windows.",
        "Thunder rolls over the hills.",
        "A storm.",
        "Black clouds, bent trees and a roaring gale.",
    ],
    "tr-calm": [
        "Soft light spills over a still lake.",
        "Birds sing while the kettle warms.",
        "Morning.",
        "Golden sunlight and quiet streets.",
    ],
}


def group_step() -> dict[str, Any]:
    """TRL's reward arguments for ``GROUP_STEP``: the messages, completions and prompt ids."""
    texts = {"tr-judged": JUDGED["prompt"]["text"], "tr-calm": CALM["prompt"]["text"]}
    rows = [(pid, text) for pid, completions in GROUP_STEP.items() for text in completions]
    return {
        "prompts": [[{"role": "user", "content": texts[pid]}] for pid, _ in rows],
        "completions": [[{"role": "assistant", "content": text}] for _, text in rows],
        "prompt_id": [pid for pid, _ in rows],
    }


def check_group_rewards(
    database_url: str, completion_ids: list[int | None], rewards: list[float | None]
) -> None:
    """The rewards are the stored group scores, and each prompt's 4 completions of the step
    were judged together: every stored group judgment shows exactly one prompt's four."""
    from sqlalchemy import select

    from rubricsvc.models import JudgeConfig, Judgment, Score
    from tests.helpers import read_database

    def read(session: Any) -> tuple[dict[int, float | None], list[list[int]]]:
        judge = session.scalars(
            select(JudgeConfig).where(JudgeConfig.name == "embedded:group")
        ).one()
        scores = session.scalars(select(Score).where(Score.judge_config_id == judge.id)).all()
        judgments = session.scalars(
            select(Judgment).where(Judgment.judge_config_id == judge.id)
        ).all()
        return {s.completion_id: s.value for s in scores}, [j.detail["order"] for j in judgments]

    scores, orders = read_database(database_url, read)
    assert len(set(completion_ids)) == 8 and None not in completion_ids
    assert rewards == [pytest.approx(scores[c]) for c in completion_ids]  # type: ignore[index]
    repeats = JudgeSpec.model_fields["group_repeats"].default
    groups = [sorted(completion_ids[:4]), sorted(completion_ids[4:])]  # type: ignore[type-var]
    assert sorted(sorted(order) for order in orders) == sorted(groups * repeats)


@pytest.mark.model
@pytest.mark.slow
def test_group_mode_judges_each_prompts_completions_of_a_step_together(sqlite_url: str) -> None:
    from tests.requirements import prepared_model_dir

    require_module("transformers", "transformers")
    prepared_model_dir()
    seed(sqlite_url, JUDGED, CALM)
    logged: dict[str, list[float]] = {}
    # The one line: `mode: group` under `reward:` in a training config.
    reward = RubricReward(ScorerSettings(database_url=sqlite_url, mode="group"))
    rewards = reward(
        **group_step(),
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
    )
    assert all(r.status == "ok" for r in reward.last_results)
    check_group_rewards(sqlite_url, [r.completion_id for r in reward.last_results], rewards)
    assert logged["rubric/masked_fraction"] == [0.0]
    # A group's rows are repeats naming completions, not criteria: no per-criterion metric.
    assert not [name for name in logged if name.startswith("criteria/")]
