"""The chain's modules: auth (accounts), bank (balances), collateral and the run registry."""
