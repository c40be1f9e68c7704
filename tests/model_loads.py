"""One read of each judge model's files per test process.

A ``TransformersBackend`` reads its tokenizer and weights from the model's folder each time one
is made: a second or more for the 135M embedded judge, several on a busy machine, and the suite
makes one for nearly every in-process ``rubricsvc score``, API app and trainer scorer. A judge
only reads what it loaded (eval mode, no gradients, nothing assigned to the model or the
tokenizer), so while a backend is being made (tests/conftest.py) its ``from_pretrained`` calls
are answered from this process's cache, keyed by the folder, its files' sizes and modification
times, and the call's arguments. Everything else the backend does when made (placement, choice
tokens, the run's count of model loads) runs as before. What is trained (the trainer's policy,
a distilled student) is loaded outside a backend's construction and never comes from here; so
is anything another thread loads meanwhile, and the model of a backend made with an adapter,
which merging writes into.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

_LOADED: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def _folder_state(source: object) -> tuple[tuple[str, int, int], ...] | None:
    """What identifies a model folder's contents; None where ``source`` names no folder (a hub
    id), which is never cached."""
    folder = Path(str(source))
    if not folder.is_dir():
        return None
    return tuple(
        (path.name, stat.st_size, stat.st_mtime_ns)
        for path in sorted(folder.iterdir())
        if path.is_file() and (stat := path.stat())
    )


def _cached(loader: Any, owner: threading.Thread) -> Any:
    def load(source: object, *args: Any, **kwargs: Any) -> Any:
        state = _folder_state(source)
        if threading.current_thread() is not owner or state is None:
            return loader(source, *args, **kwargs)
        arguments = repr((args, sorted(kwargs.items())))
        key = (loader.__self__, str(Path(str(source)).resolve()), state, arguments)
        with _LOCK:
            if key not in _LOADED:
                _LOADED[key] = loader(source, *args, **kwargs)
            return _LOADED[key]

    return load


@contextlib.contextmanager
def shared_pretrained_loads() -> Iterator[None]:
    """Within the block, this thread's tokenizer and causal-LM loads come from the cache."""
    import transformers

    owner = threading.current_thread()
    with contextlib.ExitStack() as stack:
        for auto in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
            stack.enter_context(
                mock.patch.object(auto, "from_pretrained", _cached(auto.from_pretrained, owner))
            )
        yield
