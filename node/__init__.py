"""The host operator's node: DiLoCo training of a shard, published and committed on chain."""
