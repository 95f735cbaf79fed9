"""Fleet training (issue 18): many devices learn one model on Flower, uploading seeds and
scalars (docs/fleet.md)."""
