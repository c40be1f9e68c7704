"""Importers of public benchmarks into prompts, rubrics, completions, judgments and scores."""
