"""Reading JSON, JSON Lines and YAML files with errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rubricsvc.errors import ValidationFailed


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def read_records(path: Path) -> list[tuple[str, Any]]:
    """The top-level records of a file, each with a location label for error messages.

    ``.jsonl`` gives one record per non-empty line; JSON and YAML give the document.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationFailed(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValidationFailed(f"{path}: cannot read: {err}") from None
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((f"{path}:{number}", json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValidationFailed(f"{path}:{number}: invalid JSON: {err.msg}") from None
        if not records:
            raise ValidationFailed(f"{path}: the file holds no records")
        return records
    if suffix == ".json":
        try:
            return [(str(path), json.loads(text))]
        except json.JSONDecodeError as err:
            raise ValidationFailed(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if suffix in {".yaml", ".yml"}:
        try:
            return [(str(path), yaml.load(text, Loader=_UniqueKeyLoader))]
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ValidationFailed(f"{path}{where}: invalid YAML: {problem}") from None
    raise ValidationFailed(
        f"{path}: unknown file type {suffix!r} (use .json, .jsonl, .yaml or .yml)"
    )


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def describe_validation_error(err: ValidationError, limit: int = 3) -> str:
    """A one-line summary of pydantic errors: ``field.path: message; ...``."""
    parts = []
    for item in err.errors()[:limit]:
        message = str(item["msg"]).removeprefix("Value error, ")
        loc = _format_loc(tuple(item["loc"]))
        parts.append(f"{loc}: {message}" if loc else message)
    extra = len(err.errors()) - limit
    if extra > 0:
        parts.append(f"and {extra} more")
    return "; ".join(parts)
