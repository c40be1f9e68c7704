"""Training data for a generative reward model: criterion-level labels with contrast."""
