"""Audits of judges: a library of attacks, run against a judge config and stored with it."""
