"""The lower bounds pyproject.toml allows hold what the code uses of those packages."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]

# FastAPI 0.121.0 added ``Depends(..., scope=...)`` ("Add support for dependencies with
# scopes", fastapi/fastapi#14262); before it, ``Depends(db, scope="function")`` is a
# TypeError at import. The route sessions use it (rubricsvc/api/deps.py, rubricsvc/ui/deps.py).
FASTAPI_DEPENDS_SCOPE = Version("0.121.0")


def _lowest_allowed(extra: str, name: str) -> Version:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (requirement,) = [
        r for r in map(Requirement, project["optional-dependencies"][extra]) if r.name == name
    ]
    lows = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    assert lows, f"{requirement}: no lower bound"
    return max(lows)


def test_the_lowest_fastapi_allowed_has_the_depends_scope_the_routes_use() -> None:
    uses = [
        path.relative_to(ROOT)
        for path in (ROOT / "rubricsvc").rglob("*.py")
        if re.search(r"Depends\([^)]*scope=", path.read_text(encoding="utf-8"))
    ]
    assert uses, "no Depends(scope=...) left: the recorded need no longer applies"
    assert _lowest_allowed("api", "fastapi") >= FASTAPI_DEPENDS_SCOPE, uses
    # The installed FastAPI (at or above the bound) takes it.
    from fastapi import Depends

    assert "scope" in inspect.signature(Depends).parameters
