"""The reward of a tool-using rollout: its trajectory and opened documents stored as a
completion's, scored by the platform, mixed with what the trajectory shows.

Four components, each in [0, 1] and each logged on its own (``reward/<name>``), mixed by
configurable weights (DR Tulu's by default: rubric 0.5, citations 0.2, format 0.2, search turns
0.1; ``reward = sum(w x v) / sum(w)`` over the components with a weight). The weights follow the
components that exist: without a citations rubric (``agent.citations_rubric: null``) there is
no citations component and its weight is left out, so the reward is the weighted mean of the
other components (``AgentSettings.component_weights``):

- ``rubric``: the platform's score of the final answer against the question's rubric
  (``reward.rubric``, judged criteria and trajectory criteria; the stored completion carries
  the trajectory and documents, so trajectory checks and criteria read them).
- ``citations``: the platform's score against the question's citations rubric
  (``agent.citations_rubric``, a ``kind: citations`` criterion): each cited claim checked
  against the cited document among those the agent opened, as the agent saw it (an opened
  document is stored as the environment showed it, cut to ``result_chars``); a label naming a
  document it never opened has no document, so that claim counts as unsupported.
- ``format``: 1 when the rollout ends in a written answer and no call of the policy's own
  ended the research (a bad call, an empty search, the tool budget spent); else 0.
- ``search_turns``: the searches that returned results, over ``agent.target_searches``,
  at most 1.

The components read only the stored completion (its text, trajectory and documents) and the
platform's scores of it, so ``rubricsvc score`` of the same completion gives the same reward
(``agent_reward``). A masked platform score (judge or infrastructure failures) masks the
reward; a failure the rollout caused is charged by the platform as the response's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rubricsvc.environments import find_environment
from rubricsvc.judging.readers.citations import extract_citations
from rubricsvc.judging.readers.trajectory import all_tool_calls, looks_like_error
from rubricsvc.scoring.rewards import RewardRequest, RewardResult, fill_masked
from trainer.config import AgentSettings, RewardWeights, ScorerSettings
from trainer.environments.deepresearch import SEARCH
from trainer.environments.rollouts import Rollout
from trainer.rewards import LogMetric, RubricReward, log_rubric_metrics
from trainer.scorers import Scorer


def successful_searches(trajectory: Sequence[dict[str, Any]]) -> int:
    """The searches of a stored trajectory whose result reported no error."""
    return sum(
        1
        for m in trajectory
        if m.get("role") == "tool" and m.get("name") == SEARCH and not looks_like_error(m)
    )


def format_ok(text: str, trajectory: Sequence[dict[str, Any]]) -> bool:
    """A written answer, and no tool result reporting that a call of the policy ended the
    research (the stored trajectory ends at such a result, its answer after it)."""
    errors = any(m.get("role") == "tool" and looks_like_error(m) for m in trajectory)
    return bool(text.strip()) and not errors


@dataclass(frozen=True)
class Components:
    rubric: float | None
    citations: float | None  # None: masked, or not scored (no citations rubric)
    format: float
    search_turns: float


def agent_reward(
    rubric: float | None,
    citations: float | None,
    text: str,
    trajectory: Sequence[dict[str, Any]],
    weights: RewardWeights,
    target_searches: int,
) -> tuple[float | None, Components]:
    """The reward of a stored rollout from its platform scores (``rubric``, ``citations``:
    None where masked) and its trajectory; None when a weighted platform score is masked.
    ``weights``: those of the components that exist (``AgentSettings.component_weights``: no
    citations weight without a citations rubric)."""
    components = Components(
        rubric=rubric,
        citations=citations,
        format=1.0 if format_ok(text, trajectory) else 0.0,
        search_turns=min(1.0, successful_searches(trajectory) / target_searches),
    )
    total = weighted = 0.0
    for name, weight in weights.model_dump().items():
        if not weight:
            continue
        value = getattr(components, name)
        if value is None:
            return None, components
        total += weight
        weighted += weight * value
    return (weighted / total if total else None), components


@dataclass(frozen=True)
class CallStats:
    """What one rollout did with its tools (for the per-step agent metrics)."""

    tool_calls: int
    valid_calls: int  # whose result reported no error
    searches: int
    documents_opened: int
    cited_labels: int
    cited_opened: int  # of the cited labels, those naming a document it opened


def call_stats(rollout: Rollout, generated: Sequence[dict[str, Any]]) -> CallStats:
    """``generated``: every message the policy generated (before the end cut), so calls made
    after the research ended count as calls (invalid ones)."""
    results = [m for m in generated if m.get("role") == "tool"]
    cited = extract_citations(rollout.text).cited_labels
    opened = {str(d["label"]) for d in rollout.documents}
    return CallStats(
        tool_calls=sum(1 for _ in all_tool_calls(generated)),
        valid_calls=sum(1 for m in results if not looks_like_error(m)),
        searches=successful_searches(rollout.trajectory),
        documents_opened=len(rollout.documents),
        cited_labels=len(cited),
        cited_opened=sum(1 for label in cited if label in opened),
    )


def log_agent_metrics(stats: Sequence[CallStats], log_metric: LogMetric) -> None:
    n = max(len(stats), 1)
    calls = sum(s.tool_calls for s in stats)
    cited = sum(s.cited_labels for s in stats)
    log_metric("agent/tool_call_rate", sum(1 for s in stats if s.tool_calls) / n)
    log_metric("agent/tool_calls", calls / n)
    log_metric("agent/valid_call_rate", sum(s.valid_calls for s in stats) / calls if calls else 0.0)
    log_metric("agent/search_turns", sum(s.searches for s in stats) / n)
    log_metric("agent/documents_opened", sum(s.documents_opened for s in stats) / n)
    log_metric("agent/citations", cited / n)
    # The share of cited labels that name a document the rollout opened (0 with no citation).
    log_metric(
        "agent/citation_precision", sum(s.cited_opened for s in stats) / cited if cited else 0.0
    )


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


class AgentReward(RubricReward):
    """The rollout reward for TRL's GRPOTrainer with ``environment_factory``: it reads each
    rollout from its environment (``environments=``, one instance per completion)."""

    __name__ = "agent"

    def __init__(
        self,
        settings: ScorerSettings,
        agent: AgentSettings,
        environment: str,
        *,
        scorer: Scorer | None = None,
    ) -> None:
        super().__init__(settings, scorer=scorer)
        self.agent = agent
        self.environment = environment
        self.last_rollouts: list[Rollout] = []
        self.last_requests: list[RewardRequest] = []  # what the gold scorer scores too
        self.last_components: list[Components] = []

    def rollouts(self, completions: Sequence[Any], environments: Sequence[Any]) -> list[Rollout]:
        reader = find_environment(self.environment).rollout
        return [
            reader(completion if isinstance(completion, list) else [], instance)
            for completion, instance in zip(completions, environments, strict=True)
        ]

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        environments: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        if environments is None:
            raise ValueError("the agent reward needs the rollouts' environments (environments=)")
        rollouts = self.rollouts(completions, environments)
        ids = kwargs.get(self.prompt_id_column) or [None] * len(rollouts)
        requests = [
            RewardRequest(
                r.text,
                prompt_id=None if pid is None else str(pid),
                prompt=None if pid is not None else prompt,
                trajectory=r.trajectory,
                documents=r.documents or None,
            )
            for r, pid, prompt in zip(rollouts, ids, prompts, strict=True)
        ]
        log_metric: LogMetric | None = kwargs.get("log_metric")
        proxy = self.scorer.score(requests)
        citations = self._citations(requests, ids)
        rewards: list[float | None] = []
        components: list[Components] = []
        for index, r in enumerate(rollouts):
            reward, parts = agent_reward(
                proxy[index].reward,
                citations[index].reward if citations else None,
                r.text,
                r.trajectory,
                self.agent.component_weights(),
                self.agent.target_searches,
            )
            rewards.append(reward)
            components.append(parts)
        self.last_results, self.last_rollouts, self.last_components = proxy, rollouts, components
        self.last_requests = requests
        if log_metric is not None:
            log_rubric_metrics(proxy, log_metric)
            for name in ("rubric", "citations", "format", "search_turns"):
                mean = _mean([getattr(c, name) for c in components])
                if mean is not None:
                    log_metric(f"reward/{name}", mean)
            stats = [
                call_stats(r, c if isinstance(c, list) else [])
                for r, c in zip(rollouts, completions, strict=True)
            ]
            log_agent_metrics(stats, log_metric)
        masked = self.scorer.settings.masked_reward
        return rewards if masked == "drop" else list(fill_masked(rewards, masked))

    def _citations(self, requests: list[RewardRequest], ids: Sequence[Any]) -> list[RewardResult]:
        """The citations rubric's results (none when it has no weight or no rubric)."""
        template = self.agent.citations_rubric
        if not self.agent.component_weights().citations or template is None:
            return []
        named = [
            RewardRequest(
                r.completion,
                prompt_id=r.prompt_id,
                prompt=r.prompt,
                rubric=template.format(prompt_id=pid) if "{prompt_id}" in template else template,
                trajectory=r.trajectory,
                documents=r.documents,
            )
            for r, pid in zip(requests, ids, strict=True)
        ]
        return self.scorer.score(named)

    def sample_extras(self, index: int) -> dict[str, Any]:
        """What samples.jsonl keeps of the last batch's ``index``-th rollout besides its
        text and reward: enough to store and score it again."""
        if index >= len(self.last_rollouts):
            return {}
        r = self.last_rollouts[index]
        return {
            "completion": r.text,
            "trajectory": r.trajectory,
            "documents": r.documents,
            "components": asdict(self.last_components[index]),
        }
