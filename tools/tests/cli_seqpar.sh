#!/usr/bin/env bash
# Claims of `pararnn seqpar` (run by ctest, label seqpar), one per invocation:
#   ranks_agree_with_one_rank   every per-channel cell, P = 1..4 in-process ranks and uneven
#                               chunks (a rank of one step): exit 0, "Agree", the same stats on
#                               every rank, its JSON and the reassembled H written;
#   refusals_exit_2             bad --chunks / --ranks / --launcher, a packed case, a dense cell,
#                               --launcher env without the launcher's variables: exit 2 naming
#                               the flag or variable, no output file left behind.
set -u
pararnn=$1
work=$2
claim=$3
source "$(dirname "$0")/claim_lib.sh"
rm -rf "$work/$claim" && mkdir -p "$work/$claim"
w=$work/$claim

case $claim in
ranks_agree_with_one_rank)
  for cell in gru lstm nlru slstm cfc titans; do
    expect_rc 0 "$pararnn" make-case --cell $cell --seed 4 --batch 2 --time 97 --d-in 5 --d-h 9 --h0-std 0.5 \
      --out "$w/$cell.safetensors"
    for ranks in 1 2 3 4; do
      expect_rc 0 "$pararnn" seqpar "$w/$cell.safetensors" --ranks $ranks --json "$w/$cell.$ranks.json"
      says "ranks vs one rank: Agree"
      says "the same on every rank: yes"
      [ "$(json_get "$w/$cell.$ranks.json" "['verdict']")" = "Agree" ] || fail "JSON verdict $cell P=$ranks"
      [ "$(json_get "$w/$cell.$ranks.json" "['same_stats']")" = "True" ] || fail "JSON same_stats $cell P=$ranks"
    done
    expect_rc 0 "$pararnn" seqpar "$w/$cell.safetensors" --chunks 1,95,1 --out "$w/$cell.H.safetensors"
    says "chunks 1,95,1"
    [ -s "$w/$cell.H.safetensors" ] || fail "--out did not write the reassembled H for $cell"
  done
  # The reassembled trajectory is a trajectory of the case: compare judges it against the oracle.
  expect_rc 0 "$pararnn" compare "$w/gru.safetensors" --trajectory "$w/gru.H.safetensors"
  ;;
refusals_exit_2)
  expect_rc 0 "$pararnn" make-case --cell gru --seed 1 --batch 2 --time 10 --d-in 3 --d-h 4 --out "$w/g.safetensors"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors" --chunks 5,6 --out "$w/H.safetensors"
  says "--chunks: must sum to the case's T = 10"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors" --chunks 10,0 --out "$w/H.safetensors"
  says "--chunks: every rank needs at least one step"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors" --ranks 3 --chunks 5,5
  says "--chunks: must have one length per rank"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors" --ranks 11
  says "--ranks: must be at most the case's T = 10"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors"
  says "--ranks: must be given"
  expect_rc 2 "$pararnn" seqpar "$w/g.safetensors" --ranks 2 --launcher mpi
  says "--launcher: must be in-process or env"
  expect_rc 2 env -u WORLD_SIZE -u RANK "$pararnn" seqpar "$w/g.safetensors" --launcher env
  says "WORLD_SIZE: must be set"
  expect_rc 0 "$pararnn" make-case --cell gru --seed 1 --batch 1 --time 10 --d-in 3 --d-h 4 --cu-seqlens 0,4,10 \
    --out "$w/packed.safetensors"
  expect_rc 2 "$pararnn" seqpar "$w/packed.safetensors" --ranks 2
  says "cu_seqlens: seqpar: packed cases are not built"
  expect_rc 0 "$pararnn" make-case --cell hopfield --seed 1 --batch 1 --time 10 --d-in 3 --d-h 4 --out "$w/dense.safetensors"
  expect_rc 2 "$pararnn" seqpar "$w/dense.safetensors" --ranks 2
  says "does not serve seq_parallel"
  [ ! -e "$w/H.safetensors" ] || fail "a refused seqpar wrote its output"
  ;;
*)
  fail "unknown claim $claim"
  ;;
esac
echo "PASS [$claim]"
