"""Content-addressed artifacts: the local store and the gRPC blob service hosts share them by."""
