"""bdsgd: straggler-aware synchronous distributed SGD experiments."""
