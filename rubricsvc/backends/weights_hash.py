"""Content hashes of weight folders (a judge's LoRA adapter, a judge's local model), kept so
that a folder is read once per machine, not on every lookup of its judge.

A judge's config hash covers what its weights are, not where they lie: the same files at
another path hash alike, other files at the same path differ, so a model retrained in place
is another judge and no cached verdict of the old weights is replayed for it. Hashing reads
every byte (a 135M model is half a gigabyte, an 8B one sixteen), and a spec is validated on
every lookup of its judge (a reward request's gate check among them), so a hash is kept in
memory and on disk (``hash_cache_dir``), with each file's path, inode, size, modification and
change times, and used only while they are all the same.
The change time (ctime), unlike the modification time, no copy or ``touch`` can set back:
every write sets it to the clock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rubricsvc.backends.registry import find_backend
from rubricsvc.config import default_cache_dir
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import canonical_json, files_sha256

log = logging.getLogger(__name__)

# A file changed this recently is hashed anew each time and its hash is not kept: a rewrite
# within the clock's tick (a few milliseconds) could keep every figure a kept hash is keyed by.
RECENT_SECONDS = 2.0
# Top-level files of a model folder that no loader reads: editing them is not another model.
_NOT_WEIGHTS = ("readme", "license", "notice")
_NOT_WEIGHTS_SUFFIXES = (".md",)

_HASHED: dict[str, tuple[list[list[Any]], str]] = {}
_LOCK = threading.Lock()


def hash_cache_dir() -> Path:
    """Where hashes are kept between processes (one small file each)."""
    return default_cache_dir() / "file-hashes"


def kept_files_sha256(files: Sequence[Path]) -> str:
    """``files_sha256(files)``, read once per machine while the files stay as they are."""
    stats = [(str(path.resolve()), path.stat()) for path in files]
    key = [[name, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns] for name, s in stats]
    # One kept hash per set of files, overwritten when they change: the cache stays as small
    # as the number of folders hashed.
    where = hashlib.sha256(canonical_json([name for name, _ in stats]).encode()).hexdigest()
    with _LOCK:
        known = _HASHED.get(where)
    if known is not None and known[0] == key:
        return known[1]
    kept = _read_kept(where, key)
    if kept is not None:
        with _LOCK:
            _HASHED[where] = (key, kept)
        return kept
    size = sum(s.st_size for _, s in stats)
    if size > 1 << 30:  # a large model: say why the first lookup of its judge takes a while
        log.info("hashing %d files (%.1f GB) for a judge's config hash", len(files), size / 1e9)
    hashed = files_sha256(files)
    if time.time() - max(s.st_ctime for _, s in stats) > RECENT_SECONDS:
        with _LOCK:
            _HASHED[where] = (key, hashed)
        _keep(where, key, hashed)
    return hashed


def _read_kept(where: str, key: list[list[Any]]) -> str | None:
    try:
        kept = json.loads((hash_cache_dir() / where).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # none kept, or a file this cache did not write whole: read the files
    if not isinstance(kept, dict) or kept.get("files") != key:
        return None
    hashed = kept.get("sha256")
    return hashed if isinstance(hashed, str) and len(hashed) == 64 else None


def _keep(where: str, key: list[list[Any]], hashed: str) -> None:
    """Write the hash for other processes; a cache that cannot be written only costs a re-read."""
    folder = hash_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=folder, prefix=".partial-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(canonical_json({"files": key, "sha256": hashed}))
        os.replace(partial, folder / where)  # atomic: a reader sees a whole entry or none
    except OSError as err:
        log.debug("could not keep the hash in %s: %s", folder, err)


def model_folder_files(folder: Path) -> list[Path]:
    """The files a model folder's loaders read: every top-level file but its read-me, license
    and hidden files, by name (transformers and vLLM read the top level only)."""
    files = sorted(
        (
            path
            for path in folder.iterdir()
            if path.is_file()
            and not path.name.startswith(".")
            and not path.name.lower().startswith(_NOT_WEIGHTS)
            and not path.name.lower().endswith(_NOT_WEIGHTS_SUFFIXES)
        ),
        key=lambda path: path.name,
    )
    if not files:
        raise ValidationFailed(f"model folder {folder} holds no model files")
    return files


def model_folder_sha256(folder: Path) -> str:
    """The sha256 over a model folder's files' names and bytes (``model_folder_files``)."""
    return kept_files_sha256(model_folder_files(folder))


def local_model_sha256(backend: str, model: str | None) -> str | None:
    """The sha256 of ``model``'s files where ``backend`` loads it here from a local folder;
    None for the embedded model (``model`` None), a hub id, or a backend that serves a model
    by name (a served model's name is no folder of this machine's, even where a folder of that
    name happens to lie in the working directory) or is not registered in this process."""
    registered = find_backend(backend)
    if model is None or registered is None or not registered.loads_model_in_process:
        return None
    return model_folder_sha256(Path(model)) if is_local_folder(model) else None


def is_local_folder(name: str) -> bool:
    """Whether a model's name is a folder here (a name no path can have, too long for the file
    system, is not one: ``Path.is_dir`` raises for it)."""
    try:
        return Path(name).is_dir()
    except OSError:
        return False
