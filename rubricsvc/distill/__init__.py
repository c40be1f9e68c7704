"""Judge distillation: a small student judge trained on a large judge's stored verdicts,
registered with its lineage and gated before it may serve as a reward."""
