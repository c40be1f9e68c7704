"""Reading JSON, JSON Lines and YAML files with errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rubricsvc.errors import ValidationFailed


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def read_text(path: Path) -> str:
    """The text of a UTF-8 file, or ``ValidationFailed`` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationFailed(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValidationFailed(f"{path}: cannot read: {err}") from None


def load_yaml(path: Path, loader: type[UniqueKeyLoader] = UniqueKeyLoader) -> Any:
    """The document of a YAML file; an error names the file and, where known, the line."""
    text = read_text(path)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValidationFailed(f"{path}{where}: invalid YAML: {problem}") from None


def read_records(path: Path) -> list[tuple[str, Any]]:
    """The top-level records of a file, each with a location label for error messages.

    ``.jsonl`` gives one record per non-empty line; JSON and YAML give the document.
    """
    suffix = path.suffix.lower()
    if suffix in {".yaml", ".yml"}:
        return [(str(path), load_yaml(path))]
    text = read_text(path)
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
    raise ValidationFailed(
        f"{path}: unknown file type {suffix!r} (use .json, .jsonl, .yaml or .yml)"
    )


def read_items(path: Path, noun: str, key: str | None = None) -> list[tuple[str, Any]]:
    """The items of a file, each with its location: every record of ``read_records``, where a
    record that is a list (or, given ``key``, a mapping ``{key: [...]}``) holds one item per
    entry, located as ``<record> <noun> #N``."""
    items = []
    for location, document in read_records(path):
        if key is not None and isinstance(document, dict) and set(document) == {key}:
            document = document[key]
        if not isinstance(document, list):
            items.append((location, document))
            continue
        if not document:
            raise ValidationFailed(f"{location}: the file holds no {noun}s")
        items += [(f"{location} {noun} #{n}", item) for n, item in enumerate(document, start=1)]
    return items


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
