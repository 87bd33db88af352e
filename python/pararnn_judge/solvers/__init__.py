"""Adapters of the external-solver protocol (docs/external-solvers.md): each is a command
`python -m pararnn_judge.solvers.<name> CASE OUT` that `pararnn report nightly --solver` runs on
every row. ``pararnn_torch``: the pararnn-torch library (torch and pararnn-torch are imported only
when it runs, and their absence is a clear error with a nonzero exit). ``fla`` and ``mamba``:
flash-linear-attention's and mamba-ssm's linear-recurrence ops on op cases (docs/ops/README.md),
run by scripts/ops-campaign.sh and judged by `pararnn compare`. ``_adapter_io`` (not a command): what
the three share (command line, exit statuses, case read, answer written atomically), standard library
only and loaded by path, so each adapter still runs as a plain file without our compiled module."""
