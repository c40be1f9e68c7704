"""The judge backends of a worker process: one provider, kept for every chunk, closed at shutdown."""

from __future__ import annotations

from functools import cache

from rubricsvc.backends import JudgeBackend
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.config import get_settings
from rubricsvc.judging.config import JudgeSpec


@cache
def provider() -> BackendProvider:
    """This worker's provider: one backend per judge config, behind the shared API limits."""
    return BackendProvider.from_settings(get_settings())


def backend_for(spec: JudgeSpec) -> JudgeBackend:
    """This process's backend for ``spec``, built on first use."""
    return provider().get(spec)


def close_all() -> None:
    provider().close_all()
