"""dilochain's application chain: a Cosmos-SDK-compatible state machine, its store and its servers.

This package knows nothing of torch: it sees checkpoints and pseudo-gradients only as hashes.
"""
