"""``RewardCoalescer``: concurrent requests of one kind judged as one batch, each caller
answered with its own results and counts, an error kept to the request that caused it.
The judge here is a function standing for the database and backend; the server's own batches
are tested in tests/integration/test_reward_coalescing.py."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rubricsvc.errors import NotFoundError
from rubricsvc.judging.failures import empty_counts
from rubricsvc.scoring.coalescing import RewardCoalescer, Ungatherable, split_batch
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest, RewardResult
from rubricsvc.scoring.scorer import JudgingTally


class Judge:
    """Judges a batch as a judge engine would, one batch at a time: a completion's reward is
    its length over 100 and its id the index of its text; an unknown prompt fails the batch."""

    def __init__(self, step: float = 0.05, compares: bool = False) -> None:
        self.step = step
        self.compares = compares
        self.batches: list[list[str]] = []
        self.turn = threading.Lock()

    def check(self, requests: list[RewardRequest]) -> None:
        for r in requests:
            if r.prompt_id == "missing":
                raise NotFoundError("no prompt with external id 'missing'")

    def __call__(self, requests: list[RewardRequest], gathered: bool) -> RewardBatch:
        if gathered and self.compares:
            raise Ungatherable("this judge compares completions")
        self.check(requests)
        with self.turn:
            self.batches.append([r.completion for r in requests])
            threading.Event().wait(self.step)
        batch = RewardBatch(judge="j", judge_config_hash="h", aggregation="rar", results=[])
        for r in requests:
            completion_id = sum(map(ord, r.completion))
            batch.results.append(
                RewardResult(len(r.completion) / 100, "ok", 1.0, completion_id=completion_id)
            )
            if completion_id not in batch.by_completion:
                tally = JudgingTally(judgments=2, computed=2)
                batch.by_completion[completion_id] = tally
                batch.add(tally)
        return batch


def submit_all(
    coalescer: RewardCoalescer, judge: Judge, texts: list[str], prompt_ids: list[str] | None = None
) -> list[RewardBatch | Exception]:
    """Each text in its own request, all submitted at once, as a server's requests are."""
    ids = prompt_ids or ["p"] * len(texts)

    async def one(index: int) -> RewardBatch | Exception:
        request = RewardRequest(completion=texts[index], prompt_id=ids[index])
        try:
            return await coalescer.submit("kind", [request], judge, judge.check)
        except Exception as err:
            return err

    async def every() -> list[RewardBatch | Exception]:
        return list(await asyncio.gather(*(one(i) for i in range(len(texts)))))

    return asyncio.run(every())


def test_concurrent_requests_share_batches_and_each_gets_its_own_reward() -> None:
    judge = Judge()
    texts = [f"answer {'x' * i}" for i in range(16)]
    answers = submit_all(RewardCoalescer(window=0.02, max_items=64), judge, texts)
    assert all(isinstance(a, RewardBatch) for a in answers)
    assert [a.rewards for a in answers if isinstance(a, RewardBatch)] == [
        [len(t) / 100] for t in texts
    ]
    # 16 requests arrived together: a few batches, not 16 (the first may start alone).
    assert len(judge.batches) <= 3, judge.batches
    assert sorted(t for batch in judge.batches for t in batch) == sorted(texts)
    # Each request's counts are its own completion's.
    assert {(a.judgments, a.computed) for a in answers if isinstance(a, RewardBatch)} == {(2, 2)}


def test_max_items_bounds_a_batch_and_one_disables_coalescing() -> None:
    judge = Judge(step=0.02)
    submit_all(RewardCoalescer(window=0.05, max_items=4), judge, [f"t{i}" for i in range(12)])
    assert max(len(b) for b in judge.batches) <= 4
    alone = Judge(step=0.0)
    coalescer = RewardCoalescer(window=0.0, max_items=1)
    assert not coalescer.enabled
    assert RewardCoalescer(window=0.0, max_items=2).enabled
    submit_all(coalescer, alone, ["a", "b", "c"])
    assert sorted(len(b) for b in alone.batches) == [1, 1, 1]


def test_an_error_stays_with_the_request_that_caused_it() -> None:
    judge = Judge()
    texts = [f"text {i}" for i in range(8)]
    ids = ["p"] * 8
    ids[3] = "missing"
    answers = submit_all(RewardCoalescer(window=0.05, max_items=64), judge, texts, ids)
    assert isinstance(answers[3], NotFoundError)
    good = [a for i, a in enumerate(answers) if i != 3]
    assert all(isinstance(a, RewardBatch) for a in good)
    assert [a.rewards for a in good if isinstance(a, RewardBatch)] == [
        [len(t) / 100] for i, t in enumerate(texts) if i != 3
    ]
    # The others are still judged together, not one by one.
    assert len(judge.batches) <= 2, judge.batches


def test_a_judge_that_compares_judges_each_request_alone() -> None:
    judge = Judge(step=0.01, compares=True)
    texts = [f"text {i}" for i in range(6)]
    answers = submit_all(RewardCoalescer(window=0.05, max_items=64), judge, texts)
    assert [a.rewards for a in answers if isinstance(a, RewardBatch)] == [
        [len(t) / 100] for t in texts
    ]
    assert sorted(len(b) for b in judge.batches) == [1] * 6


def test_a_completion_two_callers_name_is_counted_once() -> None:
    batch = RewardBatch(judge="j", judge_config_hash="h", aggregation="rar", results=[])
    for completion_id in (1, 2, 1):
        batch.results.append(RewardResult(0.5, "ok", 1.0, completion_id=completion_id))
    failures = empty_counts()
    failures["judge"] = 1
    batch.by_completion = {
        1: JudgingTally(judgments=3, computed=2, failed=1, failures=failures),
        2: JudgingTally(judgments=3, cached=3),
    }
    for tally in batch.by_completion.values():
        batch.add(tally)
    first, second, third = split_batch(batch, [1, 1, 1])
    assert (first.judgments, first.computed, first.cached, first.failed) == (3, 2, 0, 1)
    assert (second.judgments, second.computed, second.cached) == (3, 0, 3)
    # Judged for the first caller: cached for the third, its failure still a failure.
    assert (third.judgments, third.computed, third.cached, third.failed) == (3, 0, 2, 1)
    assert third.failures["judge"] == 1
    assert sum(p.computed for p in (first, second, third)) == batch.computed
    with pytest.raises(ValueError, match="3 results for 2 requests"):
        split_batch(batch, [1, 1])


def test_unavailable_failures_are_each_callers_only_when_all_of_the_batch_were() -> None:
    batch = RewardBatch(judge="j", judge_config_hash="h", aggregation="rar", results=[])
    batch.results = [RewardResult(None, "masked", 0.0, completion_id=i) for i in (1, 2)]
    infra = empty_counts()
    infra["infrastructure"] = 2
    batch.by_completion = {
        i: JudgingTally(judgments=2, failed=2, failures=dict(infra)) for i in (1, 2)
    }
    for tally in batch.by_completion.values():
        batch.add(tally)
    batch.unavailable, batch.retry_after = 4, 7.0
    parts = split_batch(batch, [1, 1])
    assert [(p.failed, p.unavailable, p.retry_after) for p in parts] == [(2, 2, 7.0)] * 2
    batch.unavailable = 3  # one failure was something else: no caller's reads as unavailable
    assert [p.unavailable for p in split_batch(batch, [1, 1])] == [0, 0]


def test_a_caller_that_goes_away_takes_nothing_from_the_others() -> None:
    """The first caller leads its gathering; its client hanging up (its task cancelled) must
    not leave the others that joined it unanswered."""
    judge = Judge(step=0.05)
    coalescer = RewardCoalescer(window=0.02, max_items=64)

    def submit(text: str) -> asyncio.Task[RewardBatch]:
        request = RewardRequest(completion=text, prompt_id="p")
        return asyncio.ensure_future(coalescer.submit("kind", [request], judge, judge.check))

    async def scenario() -> tuple[list[RewardBatch], asyncio.Task[RewardBatch]]:
        first = submit("first")
        await asyncio.sleep(0)
        others = [submit(f"other {i}") for i in range(3)]
        await asyncio.sleep(0.01)
        first.cancel()
        return list(await asyncio.gather(*others)), first

    answers, first = asyncio.run(scenario())
    assert first.cancelled()
    assert [a.rewards for a in answers] == [[len("other 0") / 100]] * 3
    assert judge.batches == [["first", "other 0", "other 1", "other 2"]]


def test_a_burst_that_trickles_in_is_gathered_whole() -> None:
    """Requests arriving one after another, closer than the window, join one batch however
    long the burst lasts (up to the longest wait)."""
    judge = Judge(step=0.01)
    coalescer = RewardCoalescer(window=0.05, max_items=64, max_wait=5.0)

    async def trickle() -> list[RewardBatch]:
        tasks = []
        for index in range(10):
            request = RewardRequest(completion=f"t{index}", prompt_id="p")
            tasks.append(
                asyncio.ensure_future(coalescer.submit("kind", [request], judge, judge.check))
            )
            await asyncio.sleep(0.01)  # 10 arrivals over 0.1 s: twice the window
        return list(await asyncio.gather(*tasks))

    answers = asyncio.run(trickle())
    assert [a.rewards for a in answers] == [[2 / 100]] * 10
    assert judge.batches == [[f"t{index}" for index in range(10)]]
    with pytest.raises(ValueError, match="window <= max_wait"):
        RewardCoalescer(window=0.05, max_items=8, max_wait=0.01)


def test_a_gathering_is_judged_one_window_after_its_last_request() -> None:
    """Not at the end of the window its last request arrived in: with a 0.5 s window and
    requests at 0 s and 0.3 s, the batch starts 0.5 s after the second (waiting out whole
    windows, it started 0.7 s after it, at 1.0 s)."""
    judge = Judge(step=0.0)
    coalescer = RewardCoalescer(window=0.5, max_items=64, max_wait=5.0)
    started: list[float] = []

    def judged(requests: list[RewardRequest], gathered: bool) -> RewardBatch:
        started.append(time.monotonic())
        return judge(requests, gathered)

    async def two() -> float:
        first = asyncio.ensure_future(
            coalescer.submit("kind", [RewardRequest("a", prompt_id="p")], judged, judge.check)
        )
        await asyncio.sleep(0.3)
        last = time.monotonic()
        await coalescer.submit("kind", [RewardRequest("b", prompt_id="p")], judged, judge.check)
        await first
        return last

    last = asyncio.run(two())
    assert judge.batches == [["a", "b"]]
    # Between the two behaviours (0.5 s and 0.7 s), with 0.15 s for a busy machine's scheduling.
    assert 0.49 <= started[0] - last < 0.65


def test_a_masked_reward_takes_the_mean_of_its_own_prompt_first() -> None:
    from rubricsvc.scoring.rewards import fill_masked_by_prompt

    def result(reward: float | None, completion_id: int) -> RewardResult:
        return RewardResult(
            reward, "ok" if reward is not None else "masked", 1.0, None, completion_id
        )

    results = [result(0.2, 1), result(None, 2), result(0.6, 3), result(None, 4), result(None, 5)]
    prompts = ["a", "a", "b", "c", "d"]
    filled = fill_masked_by_prompt(results, prompts, "mean", {4: 0.9})
    # 2: its prompt's other reward; 4: its prompt's stored mean; 5: the request's mean.
    assert filled == pytest.approx([0.2, 0.2, 0.6, 0.9, 0.4])
    assert fill_masked_by_prompt(results, prompts, -1.0, {4: 0.9}) == [0.2, -1.0, 0.6, -1.0, -1.0]
    lone = [result(None, 7)]
    assert fill_masked_by_prompt(lone, ["x"], "mean", {}) == [0.0]  # the judge has no score
    lone[0].judge_mean = 0.35  # the first rollout of a prompt: the judge's mean stands in
    assert fill_masked_by_prompt(lone, ["x"], "mean", {}) == [0.35]
    assert fill_masked_by_prompt(lone, ["x"], 0.1, {}) == [0.1]
