"""Settings, read from the environment (prefix ``RUBRICSVC_``) and an optional ``.env`` file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

APP_NAME = "rubricsvc"


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME))


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME))


def _default_database_url() -> str:
    return f"sqlite:///{default_data_dir() / 'rubricsvc.sqlite'}"


# Each part is its own BaseSettings with its own prefix, so the variables read as
# RUBRICSVC_DATABASE_URL, RUBRICSVC_BROKER_URL, RUBRICSVC_JUDGE_MODEL_DIR, ...
class DatabaseSettings(BaseSettings):
    """Where rubrics, completions, judgments and scores live."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_DATABASE_", env_file=".env", extra="ignore"
    )

    url: str = Field(default_factory=_default_database_url)
    echo: bool = False


class ApiLimits(BaseModel):
    """Limits of one API judge, shared by every worker through Redis (None: no limit)."""

    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    concurrent_calls: int | None = Field(default=None, gt=0)


class BrokerSettings(BaseSettings):
    """The Celery broker, where score jobs' messages go; unset means scoring runs in-process."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_BROKER_", env_file=".env", extra="ignore"
    )

    url: str | None = None
    # Chunks of a judge named NAME go to the queue PREFIX + NAME.
    queue_prefix: str = "judge."
    # Redis transport: an unacknowledged message returns to its queue after this long.
    visibility_timeout: int = Field(default=3600, gt=0)


class JobSettings(BaseSettings):
    """How score jobs are cut into chunks, watched and recovered, whatever the transport."""

    model_config = SettingsConfigDict(env_prefix="RUBRICSVC_JOBS_", env_file=".env", extra="ignore")

    # Judgments per chunk: one worker task, sent to the backend as one batch.
    chunk_judgments: int = Field(default=256, gt=0)
    # A worker writes a chunk's heartbeat this often while it scores it ...
    heartbeat_interval: float = Field(default=10.0, gt=0)
    # ... and a running chunk whose heartbeat is older than this goes to another worker.
    heartbeat_timeout: float = Field(default=120.0, gt=0)
    # A chunk still pending this long after it was sent is sent again (its message may
    # have been lost, e.g. by a broker restarted without persistence).
    requeue_after: float = Field(default=600.0, gt=0)
    # How often workers and `score --via celery` run the reaper; 0 turns theirs off.
    reap_interval: float = Field(default=60.0, ge=0)
    # Claims of one chunk before it is marked failed (a chunk that keeps killing workers).
    max_attempts: int = Field(default=5, gt=0)


class JudgeSettings(BaseSettings):
    """Where the embedded judge model is, and the limits judges behind paid APIs share."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_JUDGE_", env_file=".env", extra="ignore"
    )

    # Where `rubricsvc models prepare` writes the converted embedded model.
    model_dir: Path = Field(default_factory=lambda: default_cache_dir() / "models")
    # Judge name -> its limits, e.g. {"gpt-api": {"requests_per_minute": 500}} (JSON in env),
    # shared by every process that judges with it ...
    api_limits: dict[str, ApiLimits] = Field(default_factory=dict)
    # ... and counted in this Redis; default: the broker when it is Redis.
    limits_url: str | None = None


class ScoringSettings(BaseSettings):
    """Which rubric versions scoring and training use when not told otherwise."""

    model_config = SettingsConfigDict(
        env_prefix="RUBRICSVC_SCORING_", env_file=".env", extra="ignore"
    )

    # False: only approved versions; True: the latest draft or approved version.
    use_drafts: bool = False
    # A response the judge cannot judge because of its content (it overflows the judge's
    # context): "worst" gives each such criterion its worst value; "mask" leaves it out.
    response_failure: Literal["worst", "mask"] = "worst"
    # Judge-caused failures (unparseable or off-scale replies) above this share of a run's
    # judgments raise an alarm.
    judge_failure_alarm: float = Field(default=0.05, ge=0, le=1)
    # The reward sent for a masked score where a number is required (OpenRLHF, verl):
    # "mean" sends the mean of the batch's other rewards, so the sample moves nothing
    # under group-normalized advantages; a number is sent as it is.
    masked_reward: Literal["mean"] | float = "mean"
    # A run stores what it has judged (commits) at least this often, in seconds of judging.
    checkpoint_seconds: float = Field(default=30.0, gt=0)


def _names(value: Any) -> Any:
    """``"a, b"`` -> ``["a", "b"]``, as an environment variable gives a list."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


# The end-of-turn and end-of-text tokens of common chat models (ChatML, Llama 3, GPT-2 and
# Qwen, Llama 2 and Mistral, Gemma, Phi-3), taken off a reward response's end by default.
END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>")


class ApiSettings(BaseSettings):
    """The HTTP service (``rubricsvc serve``)."""

    model_config = SettingsConfigDict(env_prefix="RUBRICSVC_API_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, gt=0, lt=65536)
    # Larger request bodies are refused with 413 before they are read.
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # Items per request: completions in one ingest, pairs in one reward batch.
    max_completions: int = Field(default=10_000, gt=0)
    max_reward_items: int = Field(default=1024, gt=0)
    # Concurrent reward requests for the same judge config (and options) are judged as one
    # batch (``scoring.coalescing``): the first waits for others while they keep arriving,
    # until none has for the window or the longest wait has passed; all that arrive while a
    # batch is being judged form the next one. 0: gather only while a batch is judged.
    reward_batch_window_ms: float = Field(default=5.0, ge=0, le=1000)
    reward_batch_max_wait_ms: float = Field(default=50.0, ge=0, le=10_000)
    # Items in one such batch, at most (more start the next). 1: each request judged alone.
    reward_batch_max_items: int = Field(default=256, gt=0)
    # Reward groups (``scoring.groups``): the rollouts of one prompt, sent one per request,
    # held in the database until this many have come (a request or the URL may name another
    # size: ``group_size``), then judged together. Unset: only a request that names a size is
    # gathered. A group still short of its size this long after its first rollout came is
    # judged as it is, under the current set, and its answers say ``timed_out``.
    reward_group_size: int | None = Field(default=None, ge=2, le=1024)
    reward_group_timeout_s: float = Field(default=120.0, gt=0)
    # Rows of reward groups answered this long ago, or unanswered this long past their
    # time-out, are deleted; and a gathered request's own writes wait this long at most for
    # SQLite's writer while groups are judged. (A group's claim is its judging transaction's
    # locks: kept while its holder works, given up when the holder is gone.) Unset: four
    # group time-outs. Set it above the longest a group's judging may take.
    reward_group_stale_claim_s: float | None = Field(default=None, gt=0)
    # Evolving rubrics for reward requests that name an evolution run (``evolution``): the
    # settings of ``reward.evolution`` (docs/evolving-rubrics.md) as JSON, ``every`` 1 (each
    # complete group is a step). Unset: such requests are refused.
    evolution: dict[str, Any] | None = None
    # The names of API keys that may create evolution runs without the review scope (a
    # trainer's ``score`` key): a run rewards under evolved versions no person approved. JSON,
    # e.g. '["openrlhf"]'. Review and admin keys may always create one.
    evolution_creators: list[str] = Field(default_factory=list)
    # Judgments of a reward batch sent to the judge in one call, at most. A reward batch is one
    # transaction with no checkpoint: smaller calls only leave a GPU engine idle while each
    # part is stored. The cap bounds what a call holds in memory (the transformers backend
    # tokenizes a whole call first).
    reward_chunk_judgments: int = Field(default=4096, gt=0)
    max_generate_prompts: int = Field(default=16, gt=0)
    # Without a broker, score jobs run in the server on this many threads (0: never).
    local_job_threads: int = Field(default=1, ge=0)
    # Requests per minute of one API key on any route but /healthz, past which it gets 429 with
    # Retry-After. A bucket refilled continuously: a key idle for a minute may send this many
    # at once. 0 or None: no limit.
    rate_limit_per_minute: int | None = Field(default=6000, ge=0)
    # Redis that counts those requests for every server process; unset: each process counts
    # its own (in memory).
    rate_limit_url: str | None = None
    # Failed authentications (an unknown or revoked API key, a wrong key at the review pages'
    # sign-in) per minute from one client address (an IPv6 address's /64), counted like the
    # rate limit above (in Redis with rate_limit_url): past it, that address's requests that
    # need a key and its sign-ins get 429 with Retry-After, whatever key they carry, until it
    # may fail once more. 0 or None: not counted.
    failed_auth_per_minute: int | None = Field(default=60, ge=0)
    # A live API key, once looked up, is kept in memory this long: most requests skip the
    # database lookup, and a key revoked by another process works here until it expires
    # (one revoked in this process stops at once). 0: every request looks its key up.
    key_cache_seconds: float = Field(default=10.0, ge=0)
    # Work of one request, in judgments as the judge's mode plans them (``scoring.workload``:
    # comparisons, citation checks, ...; check criteria count one), refused with 413 past it:
    # a reward request, a score job.
    max_reward_judgments: int = Field(default=65_536, gt=0)
    max_job_judgments: int = Field(default=1_000_000, gt=0)
    # What the citation checks of one request cost besides their judgments, refused with 413
    # past it (``scoring.scorer.EvidenceCost``): each character of a cited document cut to
    # passages (indexed once per request), each character a check sends the judge (its claim
    # and what it shows of its document) and each passage a check ranks count one, about
    # 0.3 µs of a server each: a reward request at the bound takes about 0.7 s (two cores),
    # a score job at it about 5 minutes of one core.
    max_reward_evidence: int = Field(default=2 * 1024 * 1024, gt=0)
    max_job_evidence: int = Field(default=1024 * 1024 * 1024, gt=0)
    # Judge and rubric-generator models kept loaded (loaded on first use, never per request);
    # configs that differ only in mode, template or sampling share one. Past it: 422.
    max_judges: int = Field(default=4, gt=0)
    # Both reward routes take these off the end of a response before it is stored and judged
    # (a policy's end-of-turn and end-of-text tokens, as a trainer that decodes with
    # skip_special_tokens=False sends them): only at the end, repeated ones too, with the
    # whitespace after each; one elsewhere in the text stays. Comma-separated; empty: none.
    end_tokens: Annotated[list[str], NoDecode, BeforeValidator(_names)] = Field(
        default_factory=lambda: list(END_TOKENS)
    )
    # A key may approve a rubric version it saved itself (off: a second person must).
    allow_self_review: bool = False
    # Signs the review pages' session cookies. Unset: a random secret made when the server
    # starts (one for all the processes of ``serve --workers N``), so sessions end when the
    # server restarts.
    session_secret: SecretStr | None = None
    # A review session lasts this long after sign-in.
    session_hours: float = Field(default=12.0, gt=0)
    # What one connection may hold of a server process (``rubricsvc.api.transport``): a
    # request's line and headers must be in this many seconds after the connection opened
    # (its first request) or after the request's first byte (later ones) ...
    header_timeout: float = Field(default=10.0, gt=0)
    # ... its body within body_timeout seconds, plus one second for every body_min_rate bytes
    # that arrived (a body sent at least that fast is never cut; 0: the whole body within
    # body_timeout); time the server spends not reading does not count. Past either: 408.
    body_timeout: float = Field(default=30.0, gt=0)
    body_min_rate: int = Field(default=8192, ge=0)
    # A request whose line and headers are still coming after this many bytes: 431 (what a
    # client can make the server hold before its request begins; httptools sets no limit).
    max_header_bytes: int = Field(default=64 * 1024, gt=0)
    # A kept-alive connection with no request for this many seconds is closed (uvicorn's).
    keep_alive_timeout: int = Field(default=5, gt=0)
    # Open connections per server process, at most (lowered to fit the open-file limit); one
    # more is answered 503 and closed at once.
    max_connections: int = Field(default=2048, gt=0)
    # Connections the kernel queues for the process to accept (listen()'s backlog).
    backlog: int = Field(default=2048, gt=0)


# Variables that moved to another group: set under the old name, they would be ignored silently.
MOVED_VARIABLES = {
    **{
        f"RUBRICSVC_BROKER_{name}": f"RUBRICSVC_JOBS_{name}"
        for name in (
            "CHUNK_JUDGMENTS",
            "HEARTBEAT_INTERVAL",
            "HEARTBEAT_TIMEOUT",
            "REQUEUE_AFTER",
            "REAP_INTERVAL",
            "MAX_ATTEMPTS",
        )
    },
    "RUBRICSVC_BROKER_API_LIMITS": "RUBRICSVC_JUDGE_API_LIMITS",
    "RUBRICSVC_BROKER_LIMITS_URL": "RUBRICSVC_JUDGE_LIMITS_URL",
}


class Settings(BaseSettings):
    """All settings of rubricsvc."""

    model_config = SettingsConfigDict(env_prefix="RUBRICSVC_", env_file=".env", extra="ignore")

    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    # Modules to import at start (comma separated): they register verdict modes and the like
    # (``rubricsvc.plugins``).
    plugins: Annotated[list[str], NoDecode, BeforeValidator(_names)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _no_moved_variables(self) -> Settings:
        moved = sorted(old for old in MOVED_VARIABLES if old.upper() in map(str.upper, os.environ))
        if moved:
            raise ValueError(f"{moved[0]} is now {MOVED_VARIABLES[moved[0]]}: rename it")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests call ``get_settings.cache_clear()`` after changing env)."""
    return Settings()
