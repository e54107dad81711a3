"""What a plan costs before anything runs: each run's time and peak memory on the device it
will train on.

- calibration: seconds per step measured on this machine (builds models: only affordable ones)
- memory: bytes of one training step's peak, from the config alone (builds nothing)
- device: the target of a plan (measured here, or an assumed peak x MFU, said in the plan)
- plan: the three together for a list of RunSpecs, and the refusal of runs that cannot fit

Submodules are imported where used: memory is pure and light (the grid uses it for
micro_batch_size: auto); calibration imports torch and the model.
"""
