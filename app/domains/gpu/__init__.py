"""GPU training jobs (Tiresias, Pollux, DL2): rigid and elastic gangs of GPUs on nodes."""
