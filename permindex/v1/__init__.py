"""Generated protobuf and gRPC code for permindex.v1 (see protos/)."""
