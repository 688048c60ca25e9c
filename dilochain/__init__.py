"""dilochain's client side: the ``dilochain`` CLI, the keyring, the chain client and the protos."""

from importlib.metadata import version

__version__ = version("dilochain")  # the one version, pyproject.toml's
