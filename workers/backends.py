"""Judge backends of a worker process: built once, kept for every chunk, closed at shutdown."""

from __future__ import annotations

from rubricsvc.config import get_settings
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.backends import JudgeBackend, backend_from_spec
from rubricsvc.judging.backends.kept import KeptBackends
from rubricsvc.judging.config import JudgeSpec


def build(spec: JudgeSpec) -> JudgeBackend:
    """A new backend for ``spec``, behind the shared API limits if the judge has some."""
    broker = get_settings().broker
    limits = broker.api_limits.get(spec.name)
    url = broker.limits_url or (broker.url if (broker.url or "").startswith("redis") else None)
    if limits is not None and url is None:  # refused before any model is loaded
        raise ValidationFailed(
            f"judge {spec.name!r} has API limits, which are counted in Redis: set "
            "RUBRICSVC_BROKER_LIMITS_URL (the broker is not Redis)"
        )
    backend = backend_from_spec(spec)
    if limits is None or url is None:
        return backend
    from rubricsvc.judging.backends.limits import limited

    return limited(backend, url, spec.name, limits)


_kept = KeptBackends(build)


def backend_for(spec: JudgeSpec) -> JudgeBackend:
    """This process's backend for ``spec``, built on first use."""
    return _kept.get(spec)


def close_all() -> None:
    _kept.close_all()
