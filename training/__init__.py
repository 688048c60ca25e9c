"""The training core node and verifier share: model, data, inner step, DiLoCo, compression,
canonical tensor encoding, one round of work."""
