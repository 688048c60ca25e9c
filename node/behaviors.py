"""The names of host behaviours: honest, and the cheats the devnet and the tests play."""

from typing import Literal

Behavior = Literal[
    "honest", "random-pg", "fewer-steps", "wrong-data", "bad-reveal", "no-reveal", "copy-pg",
    "noisy",
]  # fmt: skip
