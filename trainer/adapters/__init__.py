"""Rubric rewards for other RL frameworks: verl (``compute_score``) and OpenRLHF (``reward_func``)."""
