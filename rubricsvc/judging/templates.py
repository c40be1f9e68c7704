"""Judge prompt templates: text files with ``### system`` / ``### user`` sections.

Placeholders are ``${name}`` (``string.Template``). The template's hash is part of the
judge config, so a changed template is a different judge.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from string import Template

from rubricsvc.backends.types import Chat
from rubricsvc.errors import ValidationFailed

BUNDLED_DIR = Path(__file__).resolve().parent / "prompts"
_SECTION = re.compile(r"^### (system|user|assistant)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def sections(self) -> list[tuple[str, str]]:
        return list(self._sections)

    @cached_property
    def _sections(self) -> tuple[tuple[str, str], ...]:
        # Split once per template: a run renders it once per judgment.
        parts = _SECTION.split(self.source)
        if parts[0].strip():
            raise ValidationFailed(f"template {self.name}: text before the first '### role' line")
        roles, bodies = parts[1::2], parts[2::2]
        if not roles:
            raise ValidationFailed(f"template {self.name}: no '### system' or '### user' section")
        return tuple((role, body.strip("\n")) for role, body in zip(roles, bodies, strict=True))

    @cached_property
    def _compiled(self) -> tuple[tuple[str, _Compiled], ...]:
        return tuple((role, _Compiled.of(body)) for role, body in self._sections)

    def render(self, **fields: str) -> Chat:
        """The chat for these fields; a placeholder without a value is an error."""
        chat = []
        for role, compiled in self._compiled:
            try:
                chat.append({"role": role, "content": compiled.substitute(fields)})
            except KeyError as err:
                raise ValidationFailed(
                    f"template {self.name}: no value for ${{{err.args[0]}}}"
                ) from None
        return chat


@dataclass(frozen=True)
class _Compiled:
    """A section split once into literal text and placeholder names: rendering joins them,
    where ``Template.substitute`` scans the text with a regular expression on every call (once
    per judgment, a visible share of a run's own time). The same text as ``substitute`` gives;
    a section with an invalid ``$`` is left to ``Template``, which raises as it always has."""

    pieces: tuple[str, ...]  # literals at even indexes, placeholder names at odd ones
    template: Template

    @classmethod
    def of(cls, body: str) -> _Compiled:
        template = Template(body)
        pieces: list[str] = []
        literal: list[str] = []
        last = 0
        for match in template.pattern.finditer(body):
            literal.append(body[last : match.start()])
            last = match.end()
            if match.group("escaped") is not None:
                literal.append(template.delimiter)
                continue
            name = match.group("named") or match.group("braced")
            if name is None:  # invalid: substitute raises its ValueError at render time
                return cls((), template)
            pieces += ["".join(literal), name]
            literal = []
        literal.append(body[last:])
        pieces.append("".join(literal))
        return cls(tuple(pieces), template)

    def substitute(self, fields: dict[str, str]) -> str:
        if not self.pieces:
            return self.template.substitute(fields)
        parts = list(self.pieces)
        for index in range(1, len(parts), 2):
            parts[index] = str(fields[parts[index]])
        return "".join(parts)


def load_template(name_or_path: str) -> PromptTemplate:
    """A bundled template by name (``criterion_prob``) or a template file by path."""
    bundled = BUNDLED_DIR / f"{name_or_path}.txt"
    path = bundled if bundled.is_file() else Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in BUNDLED_DIR.glob("*.txt")))
        raise ValidationFailed(f"no template {name_or_path!r}: give a file path or one of {names}")
    return PromptTemplate(name=path.stem, source=path.read_text(encoding="utf-8"))
