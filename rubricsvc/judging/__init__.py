"""Judging: verdict modes, prompt templates, verdict parsing and aggregation (the backends
that answer are in ``rubricsvc.backends``)."""
