"""A stand-in for flash-linear-attention in the CLI tests (tools/tests/cli_ops.sh): only
fla.ops.gla's chunk_gla and fused_recurrent_gla, as a naive torch loop with fla's signature, so
that python/pararnn_judge/solvers/fla.py runs end to end on the CPU without fla. Not fla: a
finding against it says nothing about fla, only about the adapter around it."""
