"""``python -m rubricsvc``: the same as the ``rubricsvc`` command."""

from rubricsvc.cli import main

main()
