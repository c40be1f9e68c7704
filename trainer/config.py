"""The training config: a YAML file validated here, every default explicit and written to the run.

The GRPO defaults are the ones rubric-reward training converged on; each field says why.
"""

from __future__ import annotations

import enum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.evolution.store import RUN_NAME
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, AggregationName
from rubricsvc.judging.config import ModeName
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.plugins import load_plugins
from rubricsvc.scoring.scorer import ScoreOptions
from trainer.refresh_config import RefreshSettings, refresh_problems

if TYPE_CHECKING:
    from rubricsvc.backends.provider import BackendProvider, JudgeLimits


@cache
def load_configured_plugins() -> tuple[str, ...]:
    """Import the plugins the settings name (``RUBRICSVC_PLUGINS``, and the installed entry
    points), once per process: the trainer's launcher and the reward adapters that score in
    the training framework's own processes call it before they read a judge or a mode's
    name. A plugin that cannot be imported raises every time it is asked for."""
    from rubricsvc.config import get_settings

    return tuple(load_plugins(get_settings().plugins))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScorerVia(enum.StrEnum):
    INPROCESS = "inprocess"  # this process scores with a kept judge (SQLite or PostgreSQL)
    CELERY = "celery"  # a job for the workers of the judge's queue
    HTTP = "http"  # the HTTP API's /v1/rewards


class LengthPenalty(Strict):
    """A reward shaped against length: ``per_word`` off the reward for every word past
    ``max_words``, at most ``max_penalty`` (a masked reward stays masked)."""

    max_words: int = Field(ge=1)
    per_word: float = Field(gt=0.0)
    max_penalty: float = Field(default=1.0, gt=0.0)

    def penalty(self, words: int) -> float:
        return min(self.max_penalty, self.per_word * max(0, words - self.max_words))


class EvolutionConfig(EvolutionSettings):
    """``reward.evolution``: evolving rubrics (trainer/evolution.py; docs/evolving-rubrics.md).
    ``run``: the evolution run's name (None: the training run's)."""

    run: str | None = None


class ScorerSettings(Strict):
    """How rewards are computed: which judge, against which rubric, through which path."""

    judge: str = "embedded"
    mode: ModeName | None = None  # None: the judge's own verdict mode
    aggregation: AggregationName = "rar"
    min_coverage: float = Field(default=DEFAULT_MIN_COVERAGE, ge=0.0, le=1.0)
    include_drafts: bool = False
    # One rubric version (REF) for every prompt, e.g. a shared scenario rubric, or a template
    # naming each prompt's own ("overopt/{prompt_id}/proxy": one of several rubrics of a
    # prompt); None: each prompt's latest usable rubric.
    rubric: str | None = None
    source: str = "trainer"  # the completions' source, so every reward traces back to its run
    via: ScorerVia = ScorerVia.INPROCESS
    database_url: str | None = None  # None: RUBRICSVC_DATABASE_URL
    base_url: str | None = None  # for via: http
    # The variable holding the API key (the key itself is never in a config).
    api_key_env: str = "RUBRICSVC_REWARD_API_KEY"
    timeout: float = Field(default=600.0, gt=0)
    # via http: a connection error, a time-out, HTTP 429 or a 5xx is tried again this many
    # times, waiting as long as the answer's Retry-After asks or else retry_backoff x
    # 2^attempt seconds (trainer/retrying.py), before the run stops on it.
    retries: int = Field(default=3, ge=0)
    retry_backoff: float = Field(default=1.0, ge=0.0)
    # A masked score (judge or infrastructure failures below the coverage floor): "drop"
    # gives TRL no reward for it (no advantage, it moves nothing); "mean" the batch's mean
    # of the other rewards; a number, that number. Counted every step either way.
    masked_reward: Literal["drop", "mean"] | float = "drop"
    # A response the judge cannot judge (it overflows the judge's context): its worst value,
    # or masked like a judge failure.
    response_failure: Literal["worst", "mask"] = "worst"
    # Judge-caused failures above this share of a step's judged criteria raise an alarm.
    judge_failure_alarm: float = Field(default=0.05, ge=0.0, le=1.0)
    # Criterion dropout (trainer/dropout.py): the share of judged criteria each rollout
    # group's reward leaves out, re-drawn every step from dropout_seed; 0: all count.
    criterion_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    dropout_seed: int = 0
    # A length penalty on the trainer's reward (None: none); the logged rubric/reward is the
    # judge's score before it, rubric/length_penalty the mean amount taken off.
    length_penalty: LengthPenalty | None = None
    # Evolving rubrics (None: the rubric stays as written); in-process scoring only.
    evolution: EvolutionConfig | None = None
    # via http: the server gathers each group of rollouts until it has this many (verl: the
    # rollouts of one ``uid``; a request's items of one prompt otherwise) and judges it as one
    # batch (``group_size`` of /v1/rewards; None: the server's setting, if any).
    group_size: int | None = Field(default=None, ge=2, le=1024)
    # via http: the server's evolution run each group is judged and evolved under
    # (``evolution`` of /v1/rewards, docs/evolving-rubrics.md; None: none).
    evolution_run: str | None = Field(default=None, pattern=RUN_NAME.pattern)

    @model_validator(mode="after")
    def _rubric_template(self) -> ScorerSettings:
        if self.rubric is not None:
            try:
                self.rubric.format(prompt_id="p")
            except (KeyError, IndexError, ValueError):
                raise ValueError(
                    f"rubric {self.rubric!r}: the only placeholder a rubric may hold is "
                    "{prompt_id}"
                ) from None
        return self

    def rubric_for(self, prompt_id: str | None) -> str | None:
        """The rubric a request of ``prompt_id`` is scored against (None: its own latest)."""
        if self.rubric is None or "{prompt_id}" not in self.rubric:
            return self.rubric
        if prompt_id is None:
            raise ValidationFailed(
                f"rubric {self.rubric!r} names each prompt's rubric by its id: give every "
                "completion a prompt id (the dataset's prompt_id column)"
            )
        return self.rubric.format(prompt_id=prompt_id)

    def engine_url(self) -> str:
        """``database_url``, or the process's configured database when it is unset."""
        if self.database_url:
            return self.database_url
        from rubricsvc.config import get_settings

        return get_settings().db.url

    def backend_provider(
        self, limits: JudgeLimits | None = None, *, share_models: bool = False
    ) -> BackendProvider:
        """The in-process scorer's provider: the process's embedded-model folder and, unless
        ``limits`` are given, the judges' shared API limits of its settings."""
        from rubricsvc.backends.provider import BackendProvider

        limits, model_dir = self.provider_inputs(limits)
        return BackendProvider(limits, share_models=share_models, model_dir=model_dir)

    def provider_inputs(self, limits: JudgeLimits | None = None) -> tuple[JudgeLimits, Any]:
        """What the in-process scorer's provider is made of: ``limits`` (None: the process
        settings' judge limits) and the process's embedded-model folder."""
        from rubricsvc.backends.provider import JudgeLimits
        from rubricsvc.config import get_settings

        settings = get_settings()
        return limits or JudgeLimits.from_settings(settings), settings.judge.model_dir

    def score_options(self) -> ScoreOptions:
        return ScoreOptions(
            aggregation=self.aggregation,
            min_coverage=self.min_coverage,
            response_failure=ResponseFailurePolicy(self.response_failure),
            judge_failure_alarm=self.judge_failure_alarm,
        )

    @model_validator(mode="after")
    def _http_needs_url(self) -> ScorerSettings:
        if self.via == ScorerVia.HTTP and not self.base_url:
            raise ValueError("via http needs base_url")
        return self

    @model_validator(mode="after")
    def _evolution_in_process(self) -> ScorerSettings:
        # Over HTTP the server evolves, under its own settings (RUBRICSVC_API_EVOLUTION): the
        # trainer names the run and the group size (docs/evolving-rubrics.md).
        if self.evolution is not None and self.via != ScorerVia.INPROCESS:
            raise ValueError(
                f"evolution: settings for evolving in process; with via: {self.via.value} the "
                "server evolves under its own settings: name its run with evolution_run (and "
                "group_size, the rollouts per prompt) instead"
            )
        if self.evolution is not None and self.criterion_dropout:
            raise ValueError("evolution and criterion_dropout: choose one")
        return self

    @model_validator(mode="after")
    def _groups_over_http(self) -> ScorerSettings:
        # Only the reward server gathers one-rollout requests into groups.
        for name in ("group_size", "evolution_run"):
            if getattr(self, name) is not None and self.via != ScorerVia.HTTP:
                raise ValueError(f"{name}: the server gathers groups, with via: http only")
        return self


class GrpoSettings(Strict):
    """What is handed to TRL's GRPOConfig (names are TRL's)."""

    # No KL term: rubric rewards are bounded and the policy should move; the reference
    # model is then never loaded (half the memory).
    beta: float = Field(default=0.0, ge=0.0)
    # Overlong filtering (DAPO): a completion cut by max_completion_length has an unreliable
    # reward (the judge saw half an answer), so it is left out of the loss.
    mask_truncated_completions: bool = True
    # Token-level loss normalized over the active tokens of the accumulated batch (DAPO):
    # no length bias, unlike the per-sequence mean of the original GRPO loss.
    loss_type: Literal["dapo", "bnpo", "dr_grpo", "grpo"] = "dapo"
    epsilon: float = Field(default=0.2, gt=0.0)
    # Clip-higher (DAPO): a wider upper bound lets rare good tokens grow; keeps entropy up.
    epsilon_high: float = Field(default=0.28, gt=0.0)
    # Advantages: rewards minus the group mean, divided by the group standard deviation.
    scale_rewards: Literal["group", "batch", "none"] = "group"
    # Several generations per prompt: the group is the baseline, so it must be big enough
    # to contain both better and worse answers.
    num_generations: int = Field(default=4, ge=2)
    max_completion_length: int = Field(default=64, ge=1)
    temperature: float = Field(default=1.0, gt=0.0)
    learning_rate: float = Field(default=1e-5, gt=0.0)
    lr_scheduler_type: str = "constant"
    per_device_train_batch_size: int = Field(default=8, ge=1)  # completions per step
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    num_iterations: int = Field(default=1, ge=1)
    max_steps: int = Field(default=20, ge=1)
    logging_steps: int = Field(default=1, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _groups_fit(self) -> GrpoSettings:
        batch = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if batch % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x gradient_accumulation_steps ({batch}) must be a "
                f"multiple of num_generations ({self.num_generations})"
            )
        return self


class GoldSettings(Strict):
    """Shadow scoring of held-out prompts with a second judge (see trainer/monitors.py)."""

    scorer: ScorerSettings
    prompts: list[str] = Field(min_length=1)  # held-out prompts' external ids
    every: int = Field(default=5, ge=1)  # steps between evaluations
    window: int = Field(default=3, ge=2)  # evaluations the held-out slopes are fitted on
    # The alarm's test (trainer/monitors.py): the chance that a run whose training score does
    # not truly rise while gold falls raises it at all. None: the raw rule, with min_slope.
    alpha: float | None = Field(default=0.05, gt=0.0, lt=1.0)
    min_slope: float = Field(default=0.0, ge=0.0)  # the raw rule's, per evaluation
    max_new_tokens: int | None = None  # None: grpo.max_completion_length
    # The training completions are scored by the gold scorer too, every this many steps (0:
    # never), so proxy (rubric/reward) and gold (gold/train_reward) are logged side by side
    # on the prompts the policy learns from. Free with a checks-only gold rubric; with a gold
    # judge it costs one more scoring of each batch.
    train_every: int = Field(default=1, ge=0)


class MonitorSettings(Strict):
    gold: GoldSettings | None = None
    ngram: int = Field(default=3, ge=1)  # repetition: share of repeated n-grams
    saturation_threshold: float = Field(default=0.95, gt=0.0, le=1.0)
    saturation_steps: int = Field(default=5, ge=1)


class RewardWeights(Strict):
    """The weights of an agent rollout's reward components (trainer/agent_reward.py): DR Tulu's
    by default. 0 leaves a component out (its platform score is then not computed)."""

    rubric: float = Field(default=0.5, ge=0.0)
    citations: float = Field(default=0.2, ge=0.0)
    format: float = Field(default=0.2, ge=0.0)
    search_turns: float = Field(default=0.1, ge=0.0)

    @model_validator(mode="after")
    def _some_weight(self) -> RewardWeights:
        if not (self.rubric or self.citations or self.format or self.search_turns):
            raise ValueError("give at least one reward component a weight")
        return self


class AgentSettings(Strict):
    """A tool environment's rollouts: the environment's options and how they are rewarded."""

    # The environment's own settings (deepresearch: corpus, tool_budget, result_chars,
    # search_results, snippet_chars; trainer/environments/deepresearch.py).
    options: dict[str, Any] = Field(default_factory=dict)
    # The rubric of each question's citations criterion (a REF or a {prompt_id} template);
    # None: no citations component.
    citations_rubric: str | None = "{prompt_id}/citations"
    weights: RewardWeights = Field(default_factory=RewardWeights)
    # Searches that returned results for a full search-turns component.
    target_searches: int = Field(default=2, ge=1)
    # TRL's max_tool_calling_iterations: generation turns after tool results; None: the
    # environment's tool budget, plus one turn for the answer.
    max_tool_turns: int | None = Field(default=None, ge=1)

    def component_weights(self) -> RewardWeights:
        """The weights of the components that exist: without a citations rubric there is no
        citations component, so its weight is left out (the reward, a weighted mean, is then
        over the remaining components, on the same 0-1 scale)."""
        if self.citations_rubric is None:
            return self.weights.model_copy(update={"citations": 0.0})
        return self.weights

    @model_validator(mode="after")
    def _some_component(self) -> AgentSettings:
        weights = self.weights
        if self.citations_rubric is None and not (
            weights.rubric or weights.format or weights.search_turns
        ):
            raise ValueError(
                "only citations has a weight, and there is no citations rubric "
                "(citations_rubric: null): give another reward component a weight"
            )
        return self


class TrainConfig(Strict):
    """One training run: policy, prompts, reward, GRPO settings, monitors and output."""

    name: str = "run"
    # Runs of one setting under several seeds share a group: `rubricsvc train compare`
    # averages them and counts the seeds. None: the run is a group of its own (its name).
    group: str | None = None
    policy: str | None = None  # a model folder; None: the embedded SmolLM2-135M-Instruct
    prompts: list[str] = Field(min_length=1)  # training prompts' external ids
    reward: ScorerSettings = Field(default_factory=ScorerSettings)
    # Control run: train on uniform random rewards (the rubric reward is still computed and
    # logged), to tell learning from noise.
    random_rewards: bool = False
    grpo: GrpoSettings = Field(default_factory=GrpoSettings)
    monitors: MonitorSettings = Field(default_factory=MonitorSettings)
    output_dir: Path = Path("runs")  # the run directory is OUTPUT_DIR/NAME
    save_policy: bool = False  # write the trained weights to the run directory
    samples_per_step: int = Field(default=8, ge=0)  # completions kept in samples.jsonl per step
    # Before training, attack the reward's judge on the demo set (`rubricsvc judges audit`)
    # and refuse to start when an attack inflates the score by more than audit_max_inflation
    # on average: a policy would find that attack. audit_attacks: all when empty. An attack
    # whose scores are masked on more than audit_max_masked_share of the items (escaping the
    # worst value a response is charged) fails the audit too.
    audit: bool = False
    audit_max_inflation: float = 0.05
    audit_max_masked_share: float = Field(default=0.0, ge=0.0, le=1.0)
    audit_attacks: list[str] = Field(default_factory=list)
    threads: int | None = Field(default=None, ge=1)  # torch threads; None: torch's default
    # Judge refresh (trainer/refresh.py): the reward's judge retrained on the run's own
    # completions every few steps and swapped in when it passes its gate. None: never.
    refresh: RefreshSettings | None = None

    @model_validator(mode="after")
    def _refresh_fits(self) -> TrainConfig:
        problems = refresh_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self

    # A tool environment (trainer/environments): the policy's rollouts are multi-turn, tool
    # calls and results, rewarded as trajectories (trainer/agent_reward.py). None: single-turn.
    environment: str | None = None
    agent: AgentSettings = Field(default_factory=AgentSettings)

    @model_validator(mode="after")
    def _agent_reward_shaping(self) -> TrainConfig:
        if self.environment is not None and (
            self.reward.length_penalty is not None or self.reward.criterion_dropout
        ):
            raise ValueError(
                "an environment's rollouts are rewarded by trainer/agent_reward.py, which "
                "applies neither length_penalty nor criterion_dropout"
            )
        if self.environment is not None and self.reward.evolution is not None:
            raise ValueError(
                "reward.evolution evolves the rubric of a single-turn reward; an environment's "
                "rollouts are rewarded by trainer/agent_reward.py: leave out one of the two"
            )
        if self.environment is not None and self.refresh is not None:
            raise ValueError(
                "refresh retrains the judge of a single-turn reward; an environment's rollouts "
                "are rewarded by trainer/agent_reward.py: leave out refresh or environment"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return self.output_dir / self.name

    @property
    def group_name(self) -> str:
        return self.group or self.name


def parse_override(assignment: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line: a dotted key (``reward.criterion_dropout``) and a
    YAML value (``0.5``, ``true``, ``[a, b]``, ``"{prompt_id}/gold"``)."""
    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise ValidationFailed(f"--set {assignment!r}: expected KEY=VALUE, e.g. grpo.seed=1")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text  # not YAML: the text itself
    return key.strip(), value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``data`` with ``value`` at the dotted ``key``, making the mappings on the way."""
    *parents, leaf = key.split(".")
    node = data
    for name in parents:
        child = node.get(name)
        if child is None:
            child = node[name] = {}
        if not isinstance(child, dict):
            raise ValidationFailed(f"--set {key}: {name!r} is not a mapping of settings")
        node = child
    node[leaf] = value


def load_config(path: Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The config in ``path`` (YAML), with ``overrides`` on top (dotted keys reach into
    sections: ``grpo.seed``); one-line errors name the field."""
    data = read_config_data(path, overrides)
    load_configured_plugins()  # before a mode's name is checked
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(f"{path}: {describe_validation_error(err)}") from None


def read_config_data(path: Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings in ``path`` (YAML) with ``overrides`` set, not yet validated; the paths a
    training config may hold (``output_dir``, ``agent.options.corpus``) relative to the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValidationFailed(f"{path}: cannot read ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise ValidationFailed(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValidationFailed(f"{path}: expected a mapping of settings")
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    # Relative paths in the file are relative to the file, not to where the command runs.
    if "output_dir" in data and not Path(str(data["output_dir"])).is_absolute():
        data["output_dir"] = str(path.parent / str(data["output_dir"]))
    # So is an environment's corpus file.
    agent = data.get("agent")
    options = agent.get("options") if isinstance(agent, dict) else None
    corpus = options.get("corpus") if isinstance(options, dict) else None
    if isinstance(options, dict) and corpus is not None and not Path(str(corpus)).is_absolute():
        options["corpus"] = str(path.parent / str(corpus))
    return data
