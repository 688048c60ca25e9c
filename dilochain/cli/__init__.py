"""The ``dilochain`` console script."""
