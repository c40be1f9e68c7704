"""`rubricsvc serve` as a subprocess on a loopback port, and what the browser tests need to
find and launch Debian's Chromium (Playwright never downloads a browser here)."""

from __future__ import annotations

import importlib.util
import os
import shutil

from tests.servers import RubricsvcServer, ServerFailed, rubricsvc_command

__all__ = ["RubricsvcServer", "ServerFailed", "rubricsvc_command"]

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps calling Google's services, which a
# closed network refuses (slowly); no sandbox because the tests may run as root in a container.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's Chromium, or one on PATH; None when there is none."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    return shutil.which("chromium")


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here (saying how to fix it), or None."""
    if chromium_path() is None:
        return (
            "Chromium is not installed (no /usr/bin/chromium, none on PATH): `make test` "
            "installs it, or run `apt-get install chromium`"
        )
    if importlib.util.find_spec("playwright") is None:
        return (
            "Playwright for Python is not installed: `make test` installs it (the dev extra), "
            "or run `pip install playwright` (never `playwright install`: it uses the "
            "system's Chromium)"
        )
    return None
