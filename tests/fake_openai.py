"""A fake OpenAI-compatible endpoint: a real HTTP server on loopback whose answers a test scripts,
so requests go through the real client, network stack and error mapping."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from rubricsvc.judging.config import JudgeSpec, VerdictMode

# The request body -> the HTTP status and the JSON payload to answer with.
Answer = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
Server = TypeVar("Server", bound="FakeOpenAI")


def chat_completion(content: str, model: str = "fake") -> dict[str, Any]:
    """The payload of a successful chat completion whose reply is ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


def logprobs_completion(probs: dict[str, float], model: str = "fake") -> dict[str, Any]:
    """The payload of a one-token reply whose ``top_logprobs`` give ``probs`` (what the backend
    reads choice probabilities from), most likely first."""
    top = [
        {"token": token, "logprob": math.log(p), "bytes": None}
        for token, p in sorted(probs.items(), key=lambda kv: -kv[1])
    ]
    payload = chat_completion(str(top[0]["token"]), model)
    payload["choices"][0]["logprobs"] = {"content": [{**top[0], "top_logprobs": top}]}
    return payload


def openai_judge(
    server: FakeOpenAI,
    name: str,
    *,
    model: str = "fake",
    retries: int = 1,
    retry_backoff: float = 0.0,
    timeout: float = 5,
) -> JudgeSpec:
    """A judge of the ``openai`` backend asking ``server`` for text verdicts (no API key)."""
    return JudgeSpec(
        name=name,
        backend="openai",
        model=model,
        mode=VerdictMode.CRITERION_TEXT,
        retries=retries,
        retry_backoff=retry_backoff,
        backend_options={"base_url": server.base_url, "timeout": timeout, "api_key_env": None},
    )


class FakeOpenAI(ThreadingHTTPServer):
    """Answers every POST with ``answer(body)``; keeps the request bodies in ``bodies``."""

    daemon_threads = True
    # socketserver's default backlog is 5: a judge sending more requests at once would find
    # some connections refused, and the test would see transport errors it did not script.
    request_queue_size = 128

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        self.headers: dict[str, str] = {}  # sent with every answer (Retry-After, ...)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def log_message(self, *_args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        status, payload = self.server.answer(body)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in self.server.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a time-out a test provokes)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """``server`` answering in a thread until the block ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
