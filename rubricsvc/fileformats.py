"""Reading JSON, JSON Lines and YAML files with errors that name the file and the line.

Every record read is held to the input policy (``rubricsvc.inputpolicy``) before any schema
sees it: a refused value fails the read with one line, ``file:LINE: field: what is wrong``.
"""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

from rubricsvc.errors import ValidationFailed
from rubricsvc.inputpolicy import (
    MAX_DEPTH,
    Refusal,
    Where,
    describe_refusal,
    find_refusal,
    format_where,
    loads_json,
    printable,
    text_problem,
)

# A document too deep for the parser is past the policy's limit too: the same words.
TOO_DEEP = f"holds values nested more than {MAX_DEPTH} levels deep"


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate mapping keys (PyYAML silently keeps the last).

    ``leaf_types`` are the types its own tags construct (values the input policy leaves to
    the reader)."""

    leaf_types: tuple[type, ...] = ()


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
    """The text of a UTF-8 file, or ``ValidationFailed`` naming the file (and the line of a
    byte that is not UTF-8, or of a NUL character: the input policy refuses it)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValidationFailed(f"{path}: no such file") from None
    except OSError as err:
        raise ValidationFailed(f"{path}: cannot read: {err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValidationFailed(
            f"{path}:{line}: not UTF-8 text: {err.reason} (byte 0x{data[err.start]:02x})"
        ) from None
    if "\x00" in text:
        offset = text.index("\x00")
        line = text.count("\n", 0, offset) + 1
        problem = text_problem(text.splitlines()[line - 1])
        raise ValidationFailed(f"{path}:{line}: {problem}")
    return text


def load_yaml(path: Path, loader: type[UniqueKeyLoader] = UniqueKeyLoader) -> Any:
    """The document of a YAML file, held to the input policy; an error names the file and,
    where known, the line."""
    text = read_text(path)
    _refuse_deep_yaml(path, text, loader)
    try:
        document = yaml.load(text, Loader=loader)
    except yaml.reader.ReaderError as err:  # a character YAML does not allow, at an offset
        line = text.count("\n", 0, err.position) + 1
        raise ValidationFailed(
            f"{path}:{line}: invalid YAML: character U+{err.character:04X} is not allowed"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValidationFailed(f"{path}{where}: invalid YAML: {problem}") from None
    except RecursionError:
        raise ValidationFailed(f"{path}: {TOO_DEEP}") from None
    refusal = find_refusal(document, leaf_types=loader.leaf_types)
    if refusal is not None:
        node_line = _yaml_line(text, refusal.where, loader)
        _refuse(f"{path}:{node_line}" if node_line else str(path), refusal)
    return document


def _refuse_deep_yaml(path: Path, text: str, loader: type[UniqueKeyLoader]) -> None:
    """Refuse nesting past ``MAX_DEPTH`` at the line it starts, read from the parser's events
    (an iterative pass): building the document recurses once per level, so whether a deep
    file fails there, and with which message, would depend on the interpreter's recursion
    limit. A syntax error is left to the load, which reports it."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    where = f":{mark.line + 1}" if mark is not None else ""
                    raise ValidationFailed(f"{path}{where}: {TOO_DEEP}")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return


def _refuse(location: str, refusal: Refusal) -> NoReturn:
    raise ValidationFailed(f"{location}: {describe_refusal(refusal)}")


def _yaml_line(text: str, where: Where, loader: type[UniqueKeyLoader]) -> int | None:
    """The line of the YAML node at ``where`` (or of its nearest ancestor found)."""
    try:
        node = yaml.compose(text, Loader=loader)
    except (yaml.YAMLError, RecursionError):
        return None
    for part in where:
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
        elif isinstance(node, yaml.MappingNode):
            found = [
                value
                for key, value in node.value
                if isinstance(key, yaml.ScalarNode) and printable(key.value) == str(part)
            ]
            if not found:
                break
            node = found[-1]
        else:
            break
    return None if node is None else int(node.start_mark.line) + 1


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
# A scalar that is not a string: a number (NaN and Infinity as Python writes them) or a name.
_JSON_SCALAR = re.compile(r"-?(?:Infinity|NaN|[0-9][0-9.eE+-]*)|true|false|null|NaN|Infinity")
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _json_line(text: str, where: Where) -> int | None:
    """The line of the value at ``where`` in the JSON document ``text`` (which parsed), or of
    its nearest ancestor found. Read along ``where`` only, stepping over other values without
    recursion: how deep the document nests must not decide whether an error names its line."""
    try:
        at = _skip_space(text, 0)
        for part in where:
            found = _json_item(text, at, part)
            if found is None:
                break
            at = found
    except (ValueError, IndexError):
        return None
    return text.count("\n", 0, at) + 1


def _json_item(text: str, at: int, part: str | int) -> int | None:
    """The offset of item ``part`` of the array (an int) or object (a key: its last value, as
    the parser keeps) starting at ``at``; None if there is none."""
    opener = "[" if isinstance(part, int) else "{"
    if text[at] != opener:
        return None
    closer = "]" if opener == "[" else "}"
    at = _skip_space(text, at + 1)
    index, found = 0, None
    while text[at] != closer:
        if isinstance(part, int):
            if index == part:
                return at
        else:
            key, at = _scan_string(text, at + 1)
            at = _skip_space(text, at)
            at = _skip_space(text, at + 1)  # past the colon
            if printable(key) == part:
                found = at
        at = _skip_space(text, _value_end(text, at))
        index += 1
        if text[at] == ",":
            at = _skip_space(text, at + 1)
    return found


def _value_end(text: str, at: int) -> int:
    """The offset just past the JSON value starting at ``at``, nesting counted, not recursed."""
    depth = 0
    while True:
        char = text[at]
        if char == '"':
            at = _scan_string(text, at + 1)[1]
        elif char in "[{":
            depth += 1
            at += 1
        elif char in "]}":
            depth -= 1
            at += 1
        elif char in ", \t\n\r:":
            at += 1
        else:
            scalar = _JSON_SCALAR.match(text, at)
            if scalar is None:
                raise ValueError(f"not JSON at offset {at}")
            at = scalar.end()
        if depth == 0:
            return at


def _skip_space(text: str, at: int) -> int:
    return _JSON_SPACE.match(text, at).end()  # type: ignore[union-attr]


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split at newlines only. ``str.splitlines`` would also
    split at U+2028, U+2029, U+0085 and a few control characters, which JSON keeps raw inside
    strings (``json.dumps(..., ensure_ascii=False)`` writes them so): a response holding one
    would break its record in two."""
    return [line.removesuffix("\r") for line in text.split("\n")]


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
        for number, line in enumerate(jsonl_lines(text), start=1):
            if not line.strip():
                continue
            location = f"{path}:{number}"
            records.append((location, _parse_json(line, location, whole_file=False)))
        if not records:
            raise ValidationFailed(f"{path}: the file holds no records")
        return records
    if suffix == ".json":
        document = _parse_json(text, str(path), whole_file=True)
        return [(str(path), document)]
    raise ValidationFailed(
        f"{path}: unknown file type {suffix!r} (use .json, .jsonl, .yaml or .yml)"
    )


def _parse_json(text: str, location: str, *, whole_file: bool) -> Any:
    """The JSON document ``text`` (a whole file, or the line of one at ``location``), held to
    the input policy; an error names the location and, for a whole file, the line."""
    try:
        document = loads_json(text)
    except json.JSONDecodeError as err:
        where = f"{location}:{err.lineno}" if whole_file else location
        raise ValidationFailed(f"{where}: invalid JSON: {err.msg}") from None
    except RecursionError:
        raise ValidationFailed(f"{location}: {TOO_DEEP}") from None
    refusal = find_refusal(document)
    if refusal is not None:
        line = _json_line(text, refusal.where) if whole_file else None
        _refuse(f"{location}:{line}" if line else location, refusal)
    return document


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


def describe_validation_error(err: ValidationError, limit: int = 3) -> str:
    """A one-line summary of pydantic errors: ``field.path: message; ...``."""
    parts = []
    for item in err.errors()[:limit]:
        message = str(item["msg"]).removeprefix("Value error, ")
        loc = format_where(tuple(item["loc"]))
        parts.append(f"{loc}: {message}" if loc else message)
    extra = len(err.errors()) - limit
    if extra > 0:
        parts.append(f"and {extra} more")
    return "; ".join(parts)
