"""Schema-guided JSON decoding for the in-process transformers backend.

vLLM and OpenAI-compatible servers decode to a JSON schema themselves; the transformers backend
does it here, for every ``GenerationRequest`` with a ``json_schema`` (a small model rarely writes
valid JSON unaided). The decoder writes the JSON skeleton (braces, keys, separators) and the
model writes the rest, sampling from its own next-token distribution restricted to the tokens
that keep the reply valid. It fills the free text of string fields (no quote, backslash or
control character; a quote ends the string), picks each enum value among the allowed ones, and
decides whether an array goes on within ``minItems`` and ``maxItems``.

Supported schemas: objects (every listed property, in the listed order), arrays with
``minItems`` of at least 1, strings and string enums: what rubric drafts use. Anything else is
refused, never approximated. The reply is then validated like any other: the decoder
guarantees JSON of the right shape, not a good rubric.

Requests are decoded together over one key/value cache: each forward pass feeds every request
either its next piece of skeleton or the one token it sampled. Each request walks its schema as
a generator that says which text to write, which tokens to feed, and when to sample under which
mask.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubricsvc.backends.base import BackendError
from rubricsvc.backends.types import Generation, GenerationRequest

MAX_STRING_TOKENS = 48  # a string still open after this many tokens ends the reply, cut


class UnsupportedSchema(Exception):
    """A schema feature this decoder does not implement."""


class _OutOfTokens(Exception):
    """A string ran past ``MAX_STRING_TOKENS``: the reply ends there, not valid JSON."""


def _clean(text: str) -> bool:
    """Whether ``text`` may stand inside a JSON string as it is."""
    return not any(ch in '"\\' or ord(ch) < 32 or ord(ch) == 127 for ch in text)


@dataclass
class _Vocabulary:
    """Each token's text, and which tokens may appear inside a JSON string."""

    texts: list[str]  # "" for special tokens
    in_string: Any  # bool tensor: the token may continue a string (or end it, see closing)
    closing: dict[int, str]  # tokens holding a quote -> their (clean) text before it
    by_text: dict[str, list[int]]

    @classmethod
    def build(cls, tokenizer: Any, size: int, torch: Any) -> _Vocabulary:
        special = set(tokenizer.all_special_ids)
        texts = [
            "" if i in special or i >= len(tokenizer) else tokenizer.decode([i])
            for i in range(size)
        ]
        in_string = torch.zeros(size, dtype=torch.bool)
        closing: dict[int, str] = {}
        by_text: dict[str, list[int]] = {}
        for token, text in enumerate(texts):
            if not text:
                continue
            by_text.setdefault(text, []).append(token)
            if _clean(text):
                in_string[token] = True
            elif '"' in text and _clean(text[: text.index('"')]):
                in_string[token] = True
                closing[token] = text[: text.index('"')]
        return cls(texts, in_string, closing, by_text)


# What a schema walk asks of the driver.
@dataclass(frozen=True)
class _Write:
    text: str  # skeleton text: added to the reply and fed to the model


@dataclass(frozen=True)
class _Feed:
    tokens: list[int]  # fed to the model; the walk records their text itself


@dataclass(frozen=True)
class _Sample:
    mask: Any  # sample one token among these; the driver sends it back into the walk


Walk = Generator[_Write | _Feed | _Sample, int | None, Any]


class GuidedDecoder:
    """Decodes the schema-bound requests of one transformers model (see the module)."""

    def __init__(self, lm: Any, tokenizer: Any, pad_id: int, torch: Any) -> None:
        self.lm = lm
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self._torch = torch
        self._vocabulary: _Vocabulary | None = None

    @property
    def vocabulary(self) -> _Vocabulary:
        if self._vocabulary is None:
            size = int(self.lm.get_output_embeddings().weight.shape[0])
            self._vocabulary = _Vocabulary.build(self.tokenizer, size, self._torch)
        return self._vocabulary

    def generate(
        self, requests: Sequence[tuple[GenerationRequest, list[int]]]
    ) -> list[Generation | BackendError]:
        """A reply per (request, its encoded chat), each request carrying a ``json_schema``."""
        rows = [
            _Row(index, ids, request, self.vocabulary, self.tokenizer)
            for index, (request, ids) in enumerate(requests)
        ]
        with self._torch.inference_mode():
            _Batch(self, rows, self._torch).run()
        return [row.result() for row in rows]


@dataclass
class _Row:
    """One request: its schema walk, the text so far, and the tokens waiting to be fed."""

    index: int
    prompt: list[int]
    request: GenerationRequest
    vocabulary: _Vocabulary
    tokenizer: Any
    pieces: list[str] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)  # tokens to feed before the next sample
    waiting: Any = None  # the mask of the sample the walk waits for
    pending: str = ""  # written text not yet tokenized (written text is tokenized together)
    generated: int = 0
    finish: str | None = None  # "stop", "length" or "error" once the row is done
    error: str | None = None  # why the schema could not be decoded (the row is done)
    walk: Walk | None = None

    def start(self, torch: Any) -> None:
        self.random = torch.Generator().manual_seed(self.request.seed or 0)
        self.torch = torch
        assert self.request.json_schema is not None
        self.walk = self._value(self.request.json_schema)
        self.advance(None)

    def result(self) -> Generation | BackendError:
        if self.error is not None:
            return BackendError(f"guided decoding: {self.error}", retryable=False)
        return Generation("".join(self.pieces), len(self.prompt), self.generated, self.finish)

    # -- driving the walk ---------------------------------------------------------------

    def advance(self, sent: int | None) -> None:
        """Run the walk until it waits for a sample with nothing left to feed, or ends."""
        assert self.walk is not None
        try:
            step = self.walk.send(sent)
            while True:
                if isinstance(step, _Write):
                    self.pieces.append(step.text)
                    self.pending += step.text
                else:
                    self._tokenize_pending()
                    if isinstance(step, _Sample):
                        self.waiting = step.mask
                        return
                    self.queue += step.tokens
                step = self.walk.send(None)
        except StopIteration:
            self.finish = "stop"
        except _OutOfTokens:
            self.finish = "length"
        except UnsupportedSchema as err:
            self.finish, self.error = "error", str(err)
        # What is still pending closes the reply; it needs no forward pass.
        self.generated += len(self._encode(self.pending)) + len(self.queue)
        self.pending, self.queue, self.waiting = "", [], None

    def next_tokens(self, logits: Any) -> list[int]:
        """The tokens this row feeds now: what the walk queued, after sampling if it waits."""
        if self.finish is None and not self.queue:
            self.advance(self._sample(logits))
        tokens, self.queue = self.queue, []
        if self.generated + len(tokens) > self.request.max_tokens:
            self.finish = "length"
            return []
        self.generated += len(tokens)
        return tokens

    def _sample(self, logits: Any) -> int:
        logits = logits.float().masked_fill(~self.waiting, float("-inf"))
        if self.request.temperature <= 0:
            return int(logits.argmax())
        probs = self.torch.softmax(logits / self.request.temperature, dim=-1)
        return int(self.torch.multinomial(probs, 1, generator=self.random))

    def _tokenize_pending(self) -> None:
        if self.pending:
            self.queue += self._encode(self.pending)
            self.pending = ""

    def _encode(self, text: str) -> list[int]:
        return (
            [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)] if text else []
        )

    # -- the schema walk ----------------------------------------------------------------

    def _value(self, schema: dict[str, Any]) -> Walk:
        kind = schema.get("type")
        if kind == "object":
            yield from self._object(schema)
        elif kind == "array":
            yield from self._array(schema)
        elif kind == "string" and "enum" in schema:
            yield from self._choose([json.dumps(o, ensure_ascii=False) for o in schema["enum"]])
        elif kind == "string":
            yield _Write('"')
            yield from self._free_text()
            yield _Write('"')
        else:
            raise UnsupportedSchema(f"schema type {kind!r} is not supported")

    def _object(self, schema: dict[str, Any]) -> Walk:
        properties = schema.get("properties") or {}
        if set(schema.get("required", [])) != set(properties):
            raise UnsupportedSchema("every property of an object must be required")
        yield _Write("{")
        for index, (name, sub) in enumerate(properties.items()):
            yield _Write((", " if index else "") + json.dumps(name) + ": ")
            yield from self._value(sub)
        yield _Write("}")

    def _array(self, schema: dict[str, Any]) -> Walk:
        least, most = int(schema.get("minItems", 0)), schema.get("maxItems")
        if least < 1 or "items" not in schema:
            raise UnsupportedSchema("an array needs items and minItems of at least 1")
        yield _Write("[")
        count = 0
        while True:
            yield from self._value(schema["items"])
            count += 1
            if most is not None and count >= int(most):
                break
            if count < least:
                yield _Write(", ")
            elif (yield from self._choose([", ", "]"])) == 1:
                return
        yield _Write("]")

    def _choose(self, options: list[str]) -> Walk:
        """Sample one of ``options`` token by token; returns the index of the one written."""
        written = ""
        while True:
            allowed = [
                token
                for option in options
                if option.startswith(written)
                for end in range(len(written) + 1, len(option) + 1)
                for token in self.vocabulary.by_text.get(option[len(written) : end], [])
            ]
            mask = self.torch.zeros_like(self.vocabulary.in_string)
            mask[allowed] = True
            token = yield _Sample(mask)
            assert token is not None
            written += self.vocabulary.texts[token]
            yield _Feed([token])
            if written in options:
                self.pieces.append(written)
                return options.index(written)

    def _free_text(self) -> Walk:
        """The model's text up to its closing quote; cut after ``MAX_STRING_TOKENS``."""
        tokens: list[int] = []
        while True:
            token = yield _Sample(self.vocabulary.in_string)
            assert token is not None
            before_quote = self.vocabulary.closing.get(token)
            if before_quote is not None:
                # The token holds the quote and maybe more: keep the text before the quote,
                # the skeleton writes the rest.
                ending = self._encode(before_quote)
                tokens += ending
                if ending:
                    yield _Feed(ending)
                break
            if len(tokens) == MAX_STRING_TOKENS:
                self.pieces.append(self.tokenizer.decode(tokens))
                raise _OutOfTokens
            tokens.append(token)
            yield _Feed([token])
        self.pieces.append(self.tokenizer.decode(tokens))


class _Batch:
    """Rows decoded together over one cache: left-padded prompts, then right-padded steps."""

    def __init__(self, decoder: GuidedDecoder, rows: list[_Row], torch: Any) -> None:
        self.lm = decoder.lm
        # Inputs go to the model's device; each row's logits come back to the CPU, where the
        # schema's token masks are and sampling runs (a vocabulary row per step: small).
        self.device = getattr(decoder.lm, "device", "cpu")
        self.pad = int(decoder.pad_id)
        self.rows = rows
        self.torch = torch
        self.cache: Any = None
        self.mask: Any = None  # attention mask over everything in the cache, padding 0
        self.lengths = [len(row.prompt) for row in rows]  # real tokens per row so far
        self.last: list[Any] = []  # each row's next-token logits

    def run(self) -> None:
        self._prefill()
        for row in self.rows:
            row.start(self.torch)
        while True:
            fed = [row.next_tokens(self.last[i]) for i, row in enumerate(self.rows)]
            if not any(fed):
                return
            if not all(fed):
                fed = self._drop_finished(fed)
            self._step(fed)

    def _drop_finished(self, fed: list[list[int]]) -> list[list[int]]:
        """Leave out the rows that are done: they would cost a forward pass for nothing."""
        keep = [i for i, tokens in enumerate(fed) if tokens]
        self.cache.batch_select_indices(self.torch.tensor(keep, device=self.device))
        self.mask = self.mask[keep]
        self.rows = [self.rows[i] for i in keep]
        self.lengths = [self.lengths[i] for i in keep]
        self.last = [self.last[i] for i in keep]
        return [fed[i] for i in keep]

    def _prefill(self) -> None:
        torch = self.torch
        width = max(self.lengths)
        ids = torch.full((len(self.rows), width), self.pad, dtype=torch.long)
        self.mask = torch.zeros((len(self.rows), width), dtype=torch.long)
        for i, row in enumerate(self.rows):
            ids[i, width - len(row.prompt) :] = torch.tensor(row.prompt)
            self.mask[i, width - len(row.prompt) :] = 1
        ids, self.mask = ids.to(self.device), self.mask.to(self.device)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        # Only the last position's logits are needed: the whole prompt's would cost more than
        # the prompt's forward pass itself (a vocabulary-sized row per token).
        output = self.lm(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache, self.last = output.past_key_values, list(output.logits[:, -1].cpu())

    def _step(self, fed: list[list[int]]) -> None:
        """Feed each row its tokens: a skeleton piece, one sampled token, or nothing (done)."""
        torch = self.torch
        width = max(len(tokens) for tokens in fed)
        # Rows feed different numbers of tokens: right-padded, the padding masked out of the
        # cache for good.
        ids = torch.full((len(fed), width), self.pad, dtype=torch.long)
        step_mask = torch.zeros((len(fed), width), dtype=torch.long)
        for i, tokens in enumerate(fed):
            ids[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            step_mask[i, : len(tokens)] = 1
        positions = torch.tensor(self.lengths).unsqueeze(1) + torch.arange(width)
        ids, step_mask, positions = (t.to(self.device) for t in (ids, step_mask, positions))
        self.mask = torch.cat([self.mask, step_mask], dim=1)
        output = self.lm(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = output.past_key_values
        for i, tokens in enumerate(fed):
            if tokens:
                self.last[i] = output.logits[i, len(tokens) - 1].cpu()
                self.lengths[i] += len(tokens)
