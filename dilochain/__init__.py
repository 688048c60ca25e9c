"""dilochain's client side: the ``dilochain`` CLI, the keyring, the chain client and the protos."""

__version__ = "0.1.0"
