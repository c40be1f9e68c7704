"""``rubricsvc keys ...``: the API keys of the HTTP service."""

from __future__ import annotations

import typer

from rubricsvc.apikeys import Scope, create_key, list_keys, revoke_key
from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.render import build_table

keys_app = typer.Typer(help="API keys of the HTTP service.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    name: str = typer.Argument(..., help="A name for the key (who or what uses it)."),
    scope: list[Scope] = typer.Option(
        ..., "--scope", help="read, author, review, score or admin (repeatable)."
    ),
) -> None:
    """Create a key and print its secret: it is shown this once, only its hash is stored."""
    with db_session() as session:
        created = create_key(session, name, [s.value for s in scope])
    err_console.print(
        f"API key {name!r} ({', '.join(created.key.scopes)}); keep the secret, it is not shown again:"
    )
    print(created.secret)


@keys_app.command("list")
def keys_list() -> None:
    """Keys with their scopes (never their secrets)."""
    with db_session() as session:
        keys = list_keys(session)
    rows = [
        [
            k.name,
            k.prefix + "...",
            ", ".join(k.scopes),
            f"{k.created_at:%Y-%m-%d %H:%M}" if k.created_at else "",
            "revoked" if k.revoked_at else "active",
        ]
        for k in keys
    ]
    headers = ["name", "key", "scopes", "created", "state"]
    console.print(
        build_table(f"{len(rows)} key(s)", headers, rows, flexible="scopes", width=console.width)
    )


@keys_app.command("revoke")
def keys_revoke(name: str = typer.Argument(..., help="The key's name.")) -> None:
    """Revoke a key: requests with it get 401 from then on (a running server may still admit
    it for RUBRICSVC_API_KEY_CACHE_SECONDS, 10 s by default)."""
    with db_session() as session:
        revoke_key(session, name)
    console.print(f"API key {name!r} revoked")
