"""rubricsvc: rubric rewards for tasks with no verifiable answer."""

__version__ = "0.1.0.dev0"
