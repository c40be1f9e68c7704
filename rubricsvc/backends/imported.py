"""The judge of verdicts imported from a data set: it replays what was stored, nothing more.

Imported judgments are served from the judgment cache like any other; this backend is only
made when something is left to judge, and new content is exactly what it cannot judge, so it
refuses to be made (which stops the run with the reason, before anything is judged).
"""

from __future__ import annotations

from typing import Any

from rubricsvc.errors import ValidationFailed


class ImportedBackend:
    """Stands for the ``imported`` judge; never made (see the module)."""

    name = "imported"

    def __init__(self, **_options: Any) -> None:
        raise ValidationFailed(
            "this judge holds verdicts imported from a data set and cannot judge new content; "
            "select only imported completions (e.g. --source) or use another judge"
        )
