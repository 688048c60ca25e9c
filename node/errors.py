"""Errors a node operator can cause and fix (kept free of torch so the CLI imports them fast)."""


class NodeError(Exception):
    """Something the operator must fix: unknown run, no collateral, wrong data…"""
