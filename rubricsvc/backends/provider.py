"""The one way code gets a judge backend: each process's provider.

A process (a worker, the API server, the trainer, a CLI command) builds one provider from its
settings at its boundary and passes it down. The provider builds each backend on first use,
keeps it for the life of the process (``kept``), and puts the judges that have shared API
limits behind them (``limits``), so N workers, the API and the trainer stay under one provider
quota together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from rubricsvc.backends import BackendChoice, JudgeBackend, backend_from_spec
from rubricsvc.backends.kept import KeptBackends, config_key, loaded_backend_key
from rubricsvc.config import ApiLimits, Settings
from rubricsvc.errors import ValidationFailed


@dataclass(frozen=True)
class JudgeLimits:
    """Judge name -> its shared API limits, and the Redis that counts them (None: none)."""

    by_judge: Mapping[str, ApiLimits] = field(default_factory=dict)
    redis_url: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> JudgeLimits:
        """The limits ``settings`` configure; counted in the broker's Redis unless told."""
        judge, broker = settings.judge, settings.broker
        redis_broker = broker.url if (broker.url or "").startswith("redis") else None
        return cls(dict(judge.api_limits), judge.limits_url or redis_broker)

    def of(self, spec: BackendChoice) -> ApiLimits | None:
        """The limits of the judge ``spec`` names (a generator has none)."""
        name = getattr(spec, "name", None)
        return self.by_judge.get(name) if isinstance(name, str) else None


class BackendProvider:
    """This process's backends: one per judge config (or, with ``share_models``, one per model
    loaded), at most ``max_backends`` (None: no bound), behind their judges' shared limits."""

    def __init__(
        self,
        limits: JudgeLimits | None = None,
        *,
        max_backends: int | None = None,
        limit_name: str = "the limit",
        share_models: bool = False,
        model_dir: Path | None = None,
        build: Callable[[BackendChoice], JudgeBackend] | None = None,
    ) -> None:
        self.limits = limits or JudgeLimits()
        self.loads = 0  # backends built: models loaded, for an in-process backend
        self._base_key = loaded_backend_key if share_models else config_key
        # ``build`` (tests) replaces the real backends; they find the embedded model in
        # ``model_dir`` (the process's RUBRICSVC_JUDGE_MODEL_DIR; None: the default cache).
        self._make = build or partial(backend_from_spec, model_dir=model_dir)
        self._kept: KeptBackends[BackendChoice] = KeptBackends(
            self._build, key=self._key, max_backends=max_backends, limit_name=limit_name
        )

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> BackendProvider:
        """The provider of a process configured by ``settings`` (see ``__init__``)."""
        options.setdefault("model_dir", settings.judge.model_dir)
        return cls(JudgeLimits.from_settings(settings), **options)

    def get(self, spec: BackendChoice) -> JudgeBackend:
        """The backend for ``spec``, built on first use; its ``close`` leaves it loaded."""
        return self._kept.get(spec)

    def factory(self, spec: BackendChoice) -> Callable[[], JudgeBackend]:
        """``get(spec)`` for later: what scoring and drafting call when they need the backend."""
        return lambda: self.get(spec)

    def check(self, spec: BackendChoice) -> None:
        """Refuse (``TooManyBackends``) a spec whose backend would go past the bound."""
        self._kept.check(spec)

    def loaded(self) -> list[str]:
        """What is loaded, in loading order."""
        return self._kept.loaded()

    def close_all(self) -> None:
        """Close every backend (the process is stopping)."""
        self._kept.close_all()

    def __enter__(self) -> BackendProvider:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close_all()

    def _key(self, spec: BackendChoice) -> str:
        # A judge with limits keeps a backend of its own: another judge sharing its model
        # would otherwise spend (or escape) its quota.
        key = self._base_key(spec)
        return f"{key}:limited:{getattr(spec, 'name', '')}" if self.limits.of(spec) else key

    def _build(self, spec: BackendChoice) -> JudgeBackend:
        self.loads += 1
        limits = self.limits.of(spec)
        if limits is None:
            return self._make(spec)
        url = self.limits.redis_url
        name = str(getattr(spec, "name", ""))
        if url is None:  # refused before any model is loaded
            raise ValidationFailed(
                f"judge {name!r} has API limits, which are counted in Redis: set "
                "RUBRICSVC_JUDGE_LIMITS_URL (the broker is not Redis)"
            )
        from rubricsvc.backends.limits import limited

        return limited(self._make(spec), url, name, limits)
