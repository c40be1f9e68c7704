"""One error family: each carries a message meant for the user, shown by the CLI and the API."""

from __future__ import annotations


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (a database error's own, not SQLAlchemy's wrapper),
    or its type's name when the message is empty."""
    text = str(getattr(err, "orig", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def database_failure(err: BaseException) -> tuple[int, str]:
    """The HTTP status and the message of a request's failed database work, its commit
    included (its transaction was rolled back): 409 for a conflict with what another
    transaction stored meanwhile, 503 for a busy or unreachable database (a lock not granted
    in time: trying again may pass), else 500. The message names no statement or value."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    if isinstance(err, IntegrityError):
        return 409, (
            "the request conflicts with what another request stored meanwhile; "
            "its transaction was rolled back: send it again"
        )
    if isinstance(err, OperationalError):
        return 503, (
            "the database was busy or unreachable; "
            "the request's transaction was rolled back: send it again"
        )
    return 500, "the database refused the request; its transaction was rolled back"


class RubricsvcError(Exception):
    """Base of all errors a user can act on; ``str(err)`` is a complete one-line message."""

    exit_code = 1


class NotFoundError(RubricsvcError):
    """An id, name or reference that matches nothing."""

    exit_code = 3


class ValidationFailed(RubricsvcError):
    """Input that does not satisfy a schema (a rubric file, a completions file, ...)."""

    exit_code = 2


class ImmutableError(RubricsvcError):
    """An attempt to change something that is frozen once saved (a rubric version, a judge config)."""

    exit_code = 4


class ConflictError(RubricsvcError):
    """A state transition that is not allowed (approving a retired version, ...)."""

    exit_code = 5


class ForbiddenError(RubricsvcError):
    """An action the caller may not take (approving a version they authored, ...)."""

    exit_code = 7


class DependencyMissing(RubricsvcError):
    """An optional dependency (an extra) is not installed."""

    exit_code = 6


def missing_extra(err: ImportError, needs: str, extras: str) -> DependencyMissing:
    """The error of an import that failed for want of an extra: what needs it, the missing
    module, and the command that installs it."""
    return DependencyMissing(f"{needs} ({err.name} is missing): pip install 'rubricsvc[{extras}]'")
