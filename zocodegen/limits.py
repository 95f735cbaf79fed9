"""What the generated firmware's configuration can hold: the one definition of the ranges of
the numbers a build writes into C (zo_train_model, zo_guard_config, training.h, firmware.h).
The command line's option types (cli_options), TrainConfig's checks (the API, a manifest, a
run.json) and the host link read them here, so no value is accepted that the device would
truncate, wrap or flush to zero (docs/contract.md "Numbers")."""
from __future__ import annotations

import numpy as np

UINT32_MAX = 0xFFFFFFFF

#: Loss differences are clamped to +-(2^31 - 1) // (N Q) so that the int32 gradient sums
#: cannot overflow (docs/training.md); above this N*Q the clamp (0.5 nats) would start to cut
#: ordinary differences.
MAX_SAMPLES_TIMES_QUERIES = 1 << 16

#: eta is a float32 (zo_train_model.lr): below float32's smallest normal number it becomes a
#: subnormal (that loses its digits, and is zero where the FPU flushes to zero) or 0
#: outright; above MAX_LR the update's float32 step sizes overflow (issue 31; the paper's eta
#: is 1e-2).
MIN_LR = float(np.finfo(np.float32).tiny)
MAX_LR = 100.0

#: TrainConfig's integer fields -> (least, most): most is the C field's limit (uint32_t),
#: or the engine's tighter bound where it has one.
TRAIN_INTEGERS: dict[str, tuple[int, int]] = {
    "steps": (0, UINT32_MAX),  # zo_train_model.steps (0: an epoch of the data, run_steps)
    "queries": (1, MAX_SAMPLES_TIMES_QUERIES),  # with batch: the loss-difference clamp
    "batch": (1, MAX_SAMPLES_TIMES_QUERIES),
    "seed": (0, UINT32_MAX),  # zo_train_model.seed
    "guard_every": (0, UINT32_MAX),  # zo_guard_config.every (0: from the forward budget)
    "guard_samples": (1, UINT32_MAX),  # zo_guard_config.samples
    "patience": (0, UINT32_MAX),  # zo_guard_config.patience (0: never stop early)
    "trial_samples": (1, UINT32_MAX),  # TRAINING_TRIAL_SAMPLES
    "trial_held_out": (1, UINT32_MAX),  # TRAINING_TRIAL_HELD_OUT
}

#: --baud: FIRMWARE_BAUD is a uint32_t, and a link's time is bits / baud (a board's USART
#: also checks what it can make: target.check_baud).
BAUD_RANGE = (1, UINT32_MAX)

