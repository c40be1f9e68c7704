"""The review pages, one module per area."""
