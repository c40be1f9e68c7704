"""The ``rubricsvc`` command."""

from rubricsvc.cli.app import app, main

__all__ = ["app", "main"]
