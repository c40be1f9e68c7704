"""A deep-research environment for tool-using GRPO rollouts: search a local corpus, open its
documents, answer with citations.

One instance serves one rollout at a time (TRL's ``environment_factory`` makes one per rollout
and resets it for the next): ``reset(**row)`` starts a rollout from the dataset's columns;
``search(query)`` (BM25 over the corpus, ``bm25s``) and ``open(doc_id)`` (the document's text
cut to ``result_chars``) are its tools, the only public methods, since TRL offers every public
method with a docstring to the policy as a tool. The final answer is the policy's last
message without a tool call. Nothing here reaches the network.

The rollout's record (``env.record``) keeps every call the environment received (name,
arguments, result) and the documents each ``open`` opened, as the policy saw them: an opened
document's text is what ``open`` showed (cut to ``result_chars``), so a citation of it is
checked against that text, not against the rest of the document the policy never read.

A call with bad arguments, a search that finds nothing and a call past the tool budget each
end the research: the result says so (it starts ``error:``, as a failing tool's result does,
so trajectory checks see it), no later call runs, and the rollout is rewarded on what it had
(``trainer.environments.rollouts``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rubricsvc.bm25 import import_bm25s
from rubricsvc.errors import DependencyMissing, ValidationFailed

SEARCH = "search"
OPEN = "open"
# How the research ended, when a call of the policy's own ended it.
BAD_ARGUMENTS = "bad_arguments"
EMPTY_SEARCH = "empty_search"
BUDGET = "budget"


class DeepResearchSettings(BaseModel):
    """The environment's settings (a training config's ``agent.options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    corpus: Path  # JSON Lines: {"id": "12", "title": ..., "text": ..., "url": ...} per line
    tool_budget: int = Field(default=4, ge=1)  # tool calls a rollout may make
    result_chars: int = Field(default=600, ge=50)  # an opened document's text is cut to this
    search_results: int = Field(default=3, ge=1)  # documents a search lists
    snippet_chars: int = Field(default=120, ge=20)  # of each listed document's text


@dataclass(frozen=True)
class CorpusDocument:
    id: str  # how the policy opens and cites it: "12" for open("12") and [12]
    title: str
    text: str
    url: str | None = None

    def record(self) -> dict[str, Any]:
        """The document as a completion lists it (``rubricsvc.documents``): cited as [id]."""
        record: dict[str, Any] = {"label": self.id, "title": self.title, "text": self.text}
        if self.url:
            record["url"] = self.url
        return record


class Corpus:
    """The documents of a corpus file, indexed for BM25 once."""

    def __init__(self, documents: list[CorpusDocument]) -> None:
        if not documents:
            raise ValidationFailed("the corpus holds no documents")
        self.documents = documents
        self.by_id = {d.id: d for d in documents}
        if len(self.by_id) != len(documents):
            raise ValidationFailed("the corpus gives a document id twice")
        bm25s = _bm25s()
        tokens = bm25s.tokenize(
            [f"{d.title}\n{d.text}" for d in documents], stopwords="en", show_progress=False
        )
        self._vocabulary = frozenset(tokens.vocab)
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[CorpusDocument]:
        """The documents BM25 ranks highest for ``query``, best first; none that shares no
        word with the query (an empty list: nothing matched)."""
        import numpy as np

        bm25s = _bm25s()
        tokenized = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        words = [w for w in tokenized[0] if w in self._vocabulary]
        if not words:
            return []
        scores = self._retriever.get_scores(words)
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.documents[int(i)] for i in order if scores[int(i)] > 0]


@cache
def load_corpus(path: Path) -> Corpus:
    """The corpus in ``path`` (JSON Lines), read and indexed once per process."""
    documents = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ValidationFailed(f"{path}: cannot read the corpus ({err.strerror})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            documents.append(
                CorpusDocument(
                    id=str(data["id"]),
                    title=str(data["title"]),
                    text=str(data["text"]),
                    url=data.get("url"),
                )
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ValidationFailed(f"{path}:{number}: not a corpus document ({err})") from None
    return Corpus(documents)


@dataclass
class ToolCall:
    """One call the environment received, and what it answered."""

    name: str
    arguments: dict[str, Any]
    result: str
    opened: str | None = None  # the document id an ``open`` opened
    refused: bool = False  # made after the research had ended: not run


@dataclass
class RolloutRecord:
    """What one rollout did in the environment."""

    row: dict[str, Any] = field(default_factory=dict)
    calls: list[ToolCall] = field(default_factory=list)
    ended: str | None = None  # BAD_ARGUMENTS, EMPTY_SEARCH, BUDGET, or None
    # Opened, by id: each as ``open`` showed it (its text cut to ``result_chars``).
    documents: dict[str, CorpusDocument] = field(default_factory=dict)

    @property
    def searches(self) -> int:
        return sum(1 for c in self.calls if c.name == SEARCH and not c.refused)


class DeepResearchEnv:
    """The environment; see the module docstring. ``settings`` name the corpus and budgets."""

    def __init__(self, settings: DeepResearchSettings) -> None:
        self.settings = settings
        self.corpus = load_corpus(settings.corpus)
        self.record = RolloutRecord()

    def reset(self, **row: Any) -> None:
        """A new rollout: the dataset row's columns (its prompt, prompt id) are kept."""
        self.record = RolloutRecord(row=dict(row))

    def search(self, query: str) -> str:
        """Search the documentation for documents about a topic.

        Args:
            query: A few words naming what to look for.

        Returns:
            The best matching documents, one per line: their id in brackets, title and first words.
        """
        if (refusal := self._refusal(SEARCH, {"query": query})) is not None:
            return refusal
        if not isinstance(query, str) or not query.strip():
            return self._end(SEARCH, {"query": query}, BAD_ARGUMENTS, "the query is empty")
        found = self.corpus.search(query, self.settings.search_results)
        if not found:
            return self._end(SEARCH, {"query": query}, EMPTY_SEARCH, "no document matches it")
        lines = [
            f"[{d.id}] {d.title}: {_snippet(d.text, self.settings.snippet_chars)}" for d in found
        ]
        return self._answer(SEARCH, {"query": query}, "\n".join(lines))

    def open(self, doc_id: str) -> str:
        """Open a document found by search and read its text.

        Args:
            doc_id: The document's id, the number search shows in brackets.

        Returns:
            The document's title and the start of its text.
        """
        arguments = {"doc_id": doc_id}
        if (refusal := self._refusal(OPEN, arguments)) is not None:
            return refusal
        key = str(doc_id).strip().strip("[]") if isinstance(doc_id, str | int) else ""
        document = self.corpus.by_id.get(key)
        if document is None:
            return self._end(OPEN, arguments, BAD_ARGUMENTS, f"no document has id {doc_id!r}")
        text = document.text[: self.settings.result_chars]
        # What the policy saw of it: what its citations are checked against.
        self.record.documents.setdefault(document.id, replace(document, text=text))
        return self._answer(
            OPEN, arguments, f"[{document.id}] {document.title}\n{text}", document.id
        )

    # --- the record ------------------------------------------------------------------------

    def _refusal(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The answer to a call that may not run: the research has ended, or this call is one
        past the budget (which ends it)."""
        if self.record.ended is not None:
            result = f"error: the research has ended ({self.record.ended}); write your answer"
            self.record.calls.append(ToolCall(name, arguments, result, refused=True))
            return result
        if len(self.record.calls) >= self.settings.tool_budget:
            budget = self.settings.tool_budget
            return self._end(name, arguments, BUDGET, f"the tool budget ({budget} calls) is spent")
        return None

    def _end(self, name: str, arguments: dict[str, Any], reason: str, why: str) -> str:
        self.record.ended = reason
        result = f"error: {why}; the research has ended: write your answer now"
        self.record.calls.append(ToolCall(name, arguments, result))
        return result

    def _answer(
        self, name: str, arguments: dict[str, Any], result: str, opened: str | None = None
    ) -> str:
        self.record.calls.append(ToolCall(name, arguments, result, opened))
        return result


def _snippet(text: str, chars: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[:chars].rstrip() + "..."


def _bm25s() -> Any:
    try:
        bm25s = import_bm25s()
    except ImportError:
        raise DependencyMissing(
            "the deep-research environment searches with bm25s: pip install 'rubricsvc[trainer]'"
        ) from None
    return bm25s


def deepresearch_factory(options: dict[str, Any]) -> Callable[[], DeepResearchEnv]:
    """The environment factory TRL is given, for a training config's ``agent.options``."""
    settings = DeepResearchSettings.model_validate(options)
    load_corpus(settings.corpus)  # a bad corpus stops the run before TRL starts

    def make() -> DeepResearchEnv:
        return DeepResearchEnv(settings)

    return make
