"""Bounds on the TRAIN options that keep the engine's integer arithmetic exact (shared by
TrainConfig and the estimators' own checks)."""

#: Loss differences are clamped to +-(2^31 - 1) // (N Q) so that the int32 gradient sums
#: cannot overflow (docs/training.md); above this N*Q the clamp (0.5 nats) would start to cut
#: ordinary differences.
MAX_SAMPLES_TIMES_QUERIES = 1 << 16
