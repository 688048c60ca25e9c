"""Errors a verifier operator can cause and fix (kept free of torch so the CLI imports them
fast)."""

from __future__ import annotations


class VerifierError(Exception):
    """Something the verifier's operator must fix: no collateral, no chain…"""
