"""Alembic migrations of the rubricsvc schema."""
