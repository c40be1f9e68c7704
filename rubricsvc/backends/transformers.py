"""In-process judging with transformers: the embedded default.

The model runs where ``device`` says at the precision ``dtype`` says (``placement``: by
default the first CUDA device in bfloat16 when there is one, else the CPU in float32).

Choice probabilities come from one forward pass. Requests that share a ``group`` share
their long prefix (the judged prompt and response, then one criterion each): the prefix's
key/value cache is computed once and reused for every criterion of the group. Generation
requests with a ``json_schema`` are decoded to it (``guided``), as vLLM and OpenAI servers do.
A judge's LoRA ``adapter`` is merged into the model when it loads (``adapters``).
"""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rubricsvc.backends.adapters import merge_adapter
from rubricsvc.backends.base import BackendError, ContextLengthError
from rubricsvc.backends.guided import GuidedDecoder
from rubricsvc.backends.placement import resolve
from rubricsvc.backends.tokens import ChoiceTokens, default_model_path, encode_chat
from rubricsvc.backends.types import (
    Chat,
    ChoiceRequest,
    ChoiceResult,
    Generation,
    GenerationRequest,
)
from rubricsvc.errors import missing_extra

# A shared prefix shorter than this is not worth a separate forward pass.
MIN_REUSED_PREFIX = 16


def _import_torch() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as err:
        raise missing_extra(
            err, "the transformers backend needs the transformers extra", "transformers"
        ) from None
    return torch, transformers


class TransformersBackend:
    """A causal LM loaded in this process."""

    name = "transformers"

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        batch_size: int = 16,
        prefix_reuse: bool = True,
        max_context: int | None = None,
        threads: int | None = None,
        model_dir: str | Path | None = None,
        device: str = "auto",
        dtype: str = "auto",
        token_budget: int | None = None,
        adapter: str | Path | None = None,
    ) -> None:
        torch, transformers = _import_torch()
        self._torch = torch
        # Before anything is read: a CUDA device this machine lacks is a clear error here.
        self.placement = resolve(device, dtype, here=True)
        self.device = torch.device(self.placement.device)
        path = Path(model) if model else default_model_path(model_dir)
        self.model = str(model) if model else path.name
        if threads:
            torch.set_num_threads(threads)
        # The load takes a second; its per-tensor progress bar is noise in command output.
        transformers.utils.logging.disable_progress_bar()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        self.choices = ChoiceTokens(self.tokenizer, self.model)
        # float32 on the CPU (``auto``): bfloat16 output of small models degenerates there.
        lm = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=getattr(torch, self.placement.dtype)
        )
        if adapter is not None:
            # Merged before the model moves to its device: one pass, then served as the base is.
            lm = merge_adapter(lm, Path(adapter))
        self.lm = lm.to(self.device)
        self.lm.eval()
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.lm.forward).parameters
        self.batch_size = batch_size
        # Padded tokens per forward pass at most (None: ``batch_size`` alone bounds a batch):
        # what fits the device's memory beside the model.
        self.token_budget = token_budget
        self.prefix_reuse = prefix_reuse
        self.context_limit = max_context or int(
            getattr(self.lm.config, "max_position_embeddings", 2048)
        )
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
        self.guided = GuidedDecoder(self.lm, self.tokenizer, self.pad_id, torch)

    def _on_device(self, *tensors: Any) -> Any:
        """``tensors`` (built on the CPU) on the model's device; one alone is returned bare."""
        moved = tuple(t.to(self.device) for t in tensors)
        return moved[0] if len(moved) == 1 else moved

    # -- encoding ---------------------------------------------------------------------

    def encode(self, chat: Chat) -> list[int]:
        """Token ids of ``chat`` rendered with the model's template, ready for the reply."""
        return encode_chat(self.tokenizer, chat)

    # -- choice probabilities ---------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        results: list[ChoiceResult | BackendError | None] = [None] * len(requests)
        encoded: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            try:
                for choice in request.choices:
                    self.choices.id_of(choice)
                ids = self.encode(request.chat)
                if len(ids) > self.context_limit:
                    raise ContextLengthError(len(ids), self.context_limit)
                encoded[index] = ids
            except BackendError as err:
                results[index] = err

        groups: dict[object, list[int]] = defaultdict(list)
        for index in encoded:
            group = requests[index].group
            key = group if (self.prefix_reuse and group is not None) else ("single", index)
            groups[key].append(index)

        with self._torch.inference_mode():
            singles = [members[0] for members in groups.values() if len(members) == 1]
            rows = self._last_logits_each([encoded[i] for i in singles])
            for index, logits in zip(singles, rows, strict=True):
                results[index] = self._result(requests[index], logits, len(encoded[index]))
            for members in groups.values():
                if len(members) > 1:
                    rows = self._last_logits_shared([encoded[i] for i in members])
                    for index, logits in zip(members, rows, strict=True):
                        results[index] = self._result(requests[index], logits, len(encoded[index]))
        return [r for r in results if r is not None]

    def _result(self, request: ChoiceRequest, logits: Any, prompt_tokens: int) -> ChoiceResult:
        # One row back to the CPU: reading each probability from a GPU would sync for each.
        probs = self._torch.softmax(logits.float().cpu(), dim=-1)
        top = self._torch.topk(probs, 5)
        return ChoiceResult(
            probs={c: float(probs[self.choices.id_of(c)]) for c in request.choices},
            prompt_tokens=prompt_tokens,
            detail={
                "top": [
                    (self.tokenizer.decode([int(t)]), round(float(p), 6))
                    for p, t in zip(top.values, top.indices, strict=True)
                ]
            },
        )

    def _left_padded(self, sequences: list[list[int]]) -> tuple[Any, Any]:
        """Token ids and attention mask of ``sequences``, padded on the left to one width."""
        torch = self._torch
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        return ids, mask

    def _last_logits_each(self, sequences: list[list[int]]) -> list[Any]:
        """Next-token logits after each sequence, in order: left-padded batches of similar
        lengths (``length_batches``), no reuse."""
        out: list[Any] = [None] * len(sequences)
        for batch in length_batches(
            [len(s) for s in sequences], self.batch_size, self.token_budget
        ):
            rows = self._last_logits_padded([sequences[i] for i in batch])
            for index, row in zip(batch, rows, strict=True):
                out[index] = row
        return out

    def _last_logits_padded(self, sequences: list[list[int]]) -> list[Any]:
        """Next-token logits after each sequence: one left-padded batch, no reuse."""
        ids, mask = self._on_device(*self._left_padded(sequences))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.lm(
            input_ids=ids, attention_mask=mask, position_ids=positions, **self._keep([-1])
        ).logits
        return [logits[row, -1] for row in range(len(sequences))]

    def _keep(self, positions: list[int]) -> dict[str, Any]:
        """The forward pass's option to compute logits at ``positions`` only (negative: from
        the end), where the model has one. The vocabulary projection of every position of a
        batch is the largest tensor of a pass (batch x width x vocabulary: 25 GB for 16
        prompts of 8k tokens with a 49k vocabulary), and a verdict reads one row of it."""
        if not self._keeps_logits:
            return {}
        if positions == [-1]:
            return {"logits_to_keep": 1}
        return {"logits_to_keep": self._torch.tensor(positions, device=self.device)}

    def _last_logits_shared(self, sequences: list[list[int]]) -> list[Any]:
        """Next-token logits after each sequence, computing their common prefix once."""
        prefix_len = reused_prefix_length(sequences)
        if not prefix_len:
            return self._last_logits_each(sequences)
        out: list[Any] = [None] * len(sequences)
        torch = self._torch
        prefix = torch.tensor([sequences[0][:prefix_len]], device=self.device)
        # Only the cache is read: the prefix's logits (a vocabulary-sized row per token) are
        # left uncomputed, as far as the model allows.
        cache = self.lm(input_ids=prefix, use_cache=True, **self._keep([-1])).past_key_values
        # The prefix's cache stays on the device and is copied into every row of a batch of
        # suffixes (``batch_repeat_interleave``): a batch holds rows x (prefix + width)
        # tokens of cache, and the budget counts the prefix in each row.
        lengths = [len(s) - prefix_len for s in sequences]
        batches = length_batches(lengths, self.batch_size, self.token_budget, prefix=prefix_len)
        for batch in batches:
            chunk = [sequences[i][prefix_len:] for i in batch]
            width = max(len(s) for s in chunk)
            # Right padding: under causal attention a pad after a token cannot change it.
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            mask = torch.ones((len(chunk), prefix_len + width), dtype=torch.long)
            for row, seq in enumerate(chunk):
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, prefix_len + len(seq) :] = 0
            positions = torch.arange(prefix_len, prefix_len + width).expand(len(chunk), -1)
            ids, mask, positions = self._on_device(ids, mask, positions)
            # The forward pass appends to the cache: each chunk works on its own copy.
            chunk_cache = copy.deepcopy(cache)
            chunk_cache.batch_repeat_interleave(len(chunk))
            last = sorted({len(seq) - 1 for seq in chunk})
            logits = self.lm(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=chunk_cache,
                use_cache=True,
                **self._keep(last),
            ).logits
            column = {p: (last.index(p) if self._keeps_logits else p) for p in last}
            for row, (index, seq) in enumerate(zip(batch, chunk, strict=True)):
                out[index] = logits[row, column[len(seq) - 1]]
        return out

    # -- generation -------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        results: list[Generation | BackendError | None] = [None] * len(requests)
        batches: dict[tuple[int, float, int | None], list[tuple[int, list[int]]]] = defaultdict(
            list
        )
        guided: list[tuple[int, list[int]]] = []
        for index, request in enumerate(requests):
            try:
                ids = self.encode(request.chat)
            except BackendError as err:  # this request's alone, not its batch's
                results[index] = err
                continue
            if len(ids) + request.max_tokens > self.context_limit:
                results[index] = ContextLengthError(
                    len(ids) + request.max_tokens, self.context_limit
                )
            elif request.json_schema is not None:
                guided.append((index, ids))
            else:
                key = (request.max_tokens, request.temperature, request.seed)
                batches[key].append((index, ids))
        if guided:
            answers = self.guided.generate([(requests[i], ids) for i, ids in guided])
            for (index, _), answer in zip(guided, answers, strict=True):
                results[index] = answer
        for (max_tokens, temperature, seed), items in batches.items():
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                outputs = self._generate_batch(
                    [ids for _, ids in chunk], max_tokens, temperature, seed
                )
                for (index, _), generation in zip(chunk, outputs, strict=True):
                    results[index] = generation
        return [r for r in results if r is not None]

    def _generate_batch(
        self, sequences: list[list[int]], max_tokens: int, temperature: float, seed: int | None
    ) -> list[Generation]:
        torch = self._torch
        ids, mask = self._on_device(*self._left_padded(sequences))
        width = ids.shape[1]
        if seed is not None:
            torch.manual_seed(seed)
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": temperature}
            if temperature > 0
            else {"do_sample": False}
        )
        with torch.inference_mode():
            output = self.lm.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_tokens,
                pad_token_id=self.pad_id,
                **sampling,
            )
        generations = []
        eos = self.tokenizer.eos_token_id
        for row in range(len(sequences)):
            new = [int(t) for t in output[row, width:]]
            finish = "length"
            if eos in new:
                new = new[: new.index(eos)]
                finish = "stop"
            else:
                while new and new[-1] == self.pad_id:
                    new.pop()
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            generations.append(Generation(text, len(sequences[row]), len(new), finish))
        return generations

    def close(self) -> None:
        del self.lm, self.guided


# What one more forward pass costs on CPU, in padded tokens: the pass's fixed work (launching
# each layer's operations, copying the prefix's cache) is worth a few tokens of a small model.
PASS_COST_TOKENS = 8


def length_batches(
    lengths: Sequence[int], max_size: int, token_budget: int | None = None, *, prefix: int = 0
) -> list[list[int]]:
    """Indices of sequences of ``lengths`` in batches of at most ``max_size``, for padded
    forward passes: sorted by length and split where the padding saved is worth another pass.
    A padded position costs a real one (every layer runs on it), and items of one batch are
    often far apart in length (a rubric's criteria after a completion's shared prefix: 40 to 80
    tokens), so one pass in the order given computes many positions it does not need: 38,454
    for 27,726 tokens over the Auto-J scenario's 40 completions.

    The split is the cheapest one of the sorted order (dynamic programming over where each
    batch ends): a batch costs its size times its longest length, plus ``PASS_COST_TOKENS``. With a
    ``token_budget``, no batch's padded size (its size times its longest length, plus
    ``prefix``: the tokens of a reused prefix's cache each row holds) passes it, except a
    sequence alone that is longer."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    # best[k]: the least cost of the first k sequences of ``order``; cut[k]: where the last of
    # their batches starts. A batch's width is its first (longest) length.
    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        for start in range(max(0, end - max_size), end):
            width = lengths[order[start]]
            if (
                token_budget is not None
                and start < end - 1
                and (end - start) * (prefix + width) > token_budget
            ):
                continue  # over the budget (a sequence alone always makes its own batch)
            cost = best[start] + (end - start) * width + PASS_COST_TOKENS
            if cost < best[end]:
                best[end], cut[end] = cost, start
    batches: list[list[int]] = []
    end = len(order)
    while end:
        batches.append(order[cut[end] : end])
        end = cut[end]
    return batches[::-1]


def reused_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """How many tokens of ``sequences`` (one group's prompts) are computed once and reused:
    their common prefix, less one token so every suffix keeps the position that gives its
    logits; 0 for a single sequence or a prefix too short to be worth a pass of its own."""
    if len(sequences) < 2:
        return 0
    length = min(_common_prefix_length(sequences), min(len(s) for s in sequences) - 1)
    return length if length >= MIN_REUSED_PREFIX else 0


def _common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    first = sequences[0]
    length = len(first)
    for seq in sequences[1:]:
        limit = min(length, len(seq))
        i = 0
        while i < limit and seq[i] == first[i]:
            i += 1
        length = i
    return length
