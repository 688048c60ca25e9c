"""The protocol layer every part of dilochain shares: torch-free, and importing no other layer.

Generated protobuf messages (``pb``), bech32 addresses, content hashes, Merkle trees, the round
schedule and data seeds, and the parameter models the chain's genesis fixes.
"""
