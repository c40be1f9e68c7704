"""Rubric rewards for RL training: reward adapters, a GRPO launcher and over-optimization monitors."""
