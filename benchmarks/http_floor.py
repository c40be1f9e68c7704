"""The HTTP floor of B8 (a): an ASGI app that does the least a reward server can do.

It reads each request's body, parses its JSON and answers one reward of 1.0 per item, with
no key, no validation, no database and no judge. Served by uvicorn as ``rubricsvc serve``
serves the API at the benchmark's log level (``python -m benchmarks.http_floor --port N``:
the same HTTP protocol, one write per response, no access log) and driven by the same client,
the time 64 one-item requests take over one request of 64 items is the part of B8 (a)'s
ratio that the HTTP stack and the client alone cost on this machine, whatever the server does.
"""

from __future__ import annotations

import argparse
import json

from starlette.types import Receive, Scope, Send


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    items = json.loads(body).get("items", []) if body else []
    answer = json.dumps({"rewards": [1.0] * len(items)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(answer)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": answer})


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the HTTP floor of B8 (a).")
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    import uvicorn

    from rubricsvc.cli.serve import server_options
    from rubricsvc.config import get_settings

    # As ``rubricsvc serve --log-level warning`` runs uvicorn (rubricsvc/cli/serve.py).
    options = server_options(get_settings(), host="127.0.0.1", port=port, log_level="warning")
    uvicorn.run(app, **options)


if __name__ == "__main__":
    main()
