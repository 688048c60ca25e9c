"""The ``dilochain`` console script."""

import os

# The chain starts CometBFT with a pre-exec hook (die with the parent), which makes Python fork
# rather than vfork; gRPC's fork handlers then re-create its poller in the child, which can
# abort it before it execs (seen as "cometbft exited with code -6" on a busy machine). No
# dilochain process forks to run gRPC in a child, so it needs no fork support.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# gRPC's C core logs its own line for an error every command reports in one line of its own
# (a port in use); GRPC_VERBOSITY=debug (or error) set by the user brings its lines back.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
