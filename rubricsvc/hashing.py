"""Content hashes: sha256 over canonical JSON, so equal content always hashes equal."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(value: Any) -> str:
    """Hex sha256 of ``value``'s canonical JSON (strings are hashed as JSON strings too)."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
