"""The validators' verifier: re-executes challenged segments with the node's own step code."""
