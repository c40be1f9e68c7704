"""Readers: code that reads a response or its documents without a model. Each is
deterministic: the same input always reads the same way.

- ``citations``: which sentence of a report cites which source.
- ``evidence``: the passages of a long document that bear on a claim (BM25).
- ``trajectory``: an agent's messages, tool calls and tool results.
- ``checks``: the deterministic criteria (kind ``check``): RE2 regexes, substrings, counts and
  the trajectory checks.
"""
