"""Content hashes: sha256 over canonical JSON, so equal content always hashes equal."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rubricsvc.errors import ValidationFailed
from rubricsvc.inputpolicy import describe_refusal, find_refusal
from rubricsvc.jsontext import make_encoder

# Built once (``jsontext``): ``json.dumps`` with these options builds its encoder on every
# call, which was most of hashing a judgment's cache key. Same output.
_CANONICAL = make_encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL(value)


def content_hash(value: Any) -> str:
    """Hex sha256 of ``value``'s canonical JSON (strings are hashed as JSON strings too).

    Text that is not Unicode (a lone surrogate) has no bytes to hash: ``ValidationFailed``
    says where, as the input policy does at every door before text gets this far."""
    text = canonical_json(value)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        refusal = find_refusal(value)
        raise ValidationFailed(
            f"cannot hash: {describe_refusal(refusal) if refusal else 'text is not Unicode'}"
        ) from None
    return hashlib.sha256(data).hexdigest()


def files_sha256(paths: Iterable[Path]) -> str:
    """Hex sha256 over each file's name and bytes, in the order given: what a folder of
    weights holds, so equal files hash equal wherever the folder is."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
