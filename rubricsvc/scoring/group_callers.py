"""Whether the process that sent a waiting reward-group rollout is still there.

A rollout's row (``scoring.groups``) names the process whose caller waits on it (``caller``,
a random token per process). A framework that lost its connection after the rollout was
stored (its server process was killed) sends the same rollout again; the row it left must
then be taken over by the retry, not joined by a second copy of the rollout. What tells a
retry from a second rollout with the same text (legitimate: a policy may sample one answer
twice) is that the first one's caller is gone: its process no longer holds its lock.

The lock is one the database's host releases by itself when the process ends, however it
ends (killed, crashed), so no heartbeat has to be written and nothing waits for one to age:

- PostgreSQL: a session advisory lock (``GROUP_CALLERS``, token) on a connection the process
  keeps open for this; its session ends, and the lock with it, when the process's socket
  closes. Another process asks with ``pg_try_advisory_xact_lock_shared``, released at its
  commit: shared, so that several asking at once (retries of one dead process's rollouts)
  do not take each other for the holder.
- SQLite (one host by nature): an exclusive ``flock`` on the file ``<token>.lock`` in the
  folder ``<database>-groups``, released by the kernel when the process exits; another
  process probes it with a shared lock of its own, which fails while the holder lives (a
  file that is not there: its holder is gone) and never while another only probes. A probe
  that gets the lock deletes the file.
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

# The first key of the advisory locks that stand for waiting processes (any fixed int4).
GROUP_CALLERS = 0x52474331

try:  # POSIX; elsewhere no SQLite process is ever found gone (a retry joins as a rollout)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms we run
    fcntl = None  # type: ignore[assignment]


class Callers:
    """This process's token, held by its lock from the first ``token()`` on; and whether
    another token's process still holds its own (``alive``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._token: int | None = None
        self._pid = 0
        self._guard = threading.Lock()
        self._held: Connection | None = None  # PostgreSQL: the session holding our lock
        self._file: int | None = None  # SQLite: the descriptor holding our lock file

    def token(self) -> int:
        """This process's token, its lock taken on first use (after any fork)."""
        with self._guard:
            if self._token is None or self._pid != os.getpid():
                self._pid = os.getpid()
                token = secrets.randbelow(2**31 - 1) + 1
                while not self._hold(token):  # another live process drew it: draw again
                    token = secrets.randbelow(2**31 - 1) + 1
                self._token = token
            return self._token

    def alive(self, session: Session, token: int) -> bool:
        """Whether ``token``'s process still holds its lock (this process: always)."""
        if token == self.token():
            return True
        if self.engine.dialect.name == "postgresql":
            free = session.scalar(
                text("SELECT pg_try_advisory_xact_lock_shared(:space, :token)"),
                {"space": GROUP_CALLERS, "token": token},
            )
            return not free
        return self._file_held(token)

    def close(self) -> None:
        """Let this process's lock go (a clean shutdown)."""
        with self._guard:
            if self._held is not None:
                self._held.close()
                self._held = None
            folder = _lock_folder(self.engine)
            if self._file is not None and folder is not None:
                (folder / f"{self._token}.lock").unlink(missing_ok=True)
                os.close(self._file)
                self._file = None
            self._token = None

    def _hold(self, token: int) -> bool:
        """Take ``token``'s lock; False where another process holds it."""
        if self.engine.dialect.name == "postgresql":
            held = self.engine.connect()
            taken = held.scalar(
                text("SELECT pg_try_advisory_lock(:space, :token)"),
                {"space": GROUP_CALLERS, "token": token},
            )
            held.commit()  # a session lock outlives the transaction; none stays open
            if not taken:
                held.close()
                return False
            self._held = held
            return True
        folder = _lock_folder(self.engine)
        if folder is None or fcntl is None:
            return True  # an in-memory database: one process, every token its own
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(folder / f"{token}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            return False
        self._file = descriptor
        return True

    def _file_held(self, token: int) -> bool:
        folder = _lock_folder(self.engine)
        if folder is None or fcntl is None:
            return True  # nothing to ask: never take a rollout for a retry
        path = folder / f"{token}.lock"
        try:
            probe = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True  # its process holds it
        else:
            path.unlink(missing_ok=True)  # its process is gone: so is its file
            return False
        finally:
            os.close(probe)


def _lock_folder(engine: Engine) -> Path | None:
    database: Any = engine.url.database
    if not database or database == ":memory:" or str(database).startswith("file:"):
        return None
    path = Path(database).expanduser()
    return path.with_name(path.name + "-groups")
