"""The HTTP service: rubrics, completions, score jobs and rewards for other programs.

``create_app()`` builds the FastAPI application; ``rubricsvc serve`` runs it with uvicorn.
"""

from rubricsvc.api.app import create_app

__all__ = ["create_app"]
