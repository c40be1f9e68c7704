"""Celery workers that batch-score completions (thin shells around ``rubricsvc`` services)."""
