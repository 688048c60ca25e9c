"""Errors about a run's data (kept free of torch so the CLI imports them fast)."""

from __future__ import annotations


class DataError(ValueError):
    """Data that cannot be used for training: says which file and why."""


class DataUnavailable(DataError):
    """Data that no peer could serve (yet)."""
