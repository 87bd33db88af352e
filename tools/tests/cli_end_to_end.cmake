# End-to-end claims of the `pararnn` tool, run by ctest (cmake -P):
#   make-case -> verify prints Agree, exits 0 and writes its JSON;
#   oracle -> perturb one element -> compare reports Disagree (exit 1) at the planted index;
#   a malformed case file and a bad flag are refused with exit 2.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(run expected_rc)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expected_rc)
    message(FATAL_ERROR "expected exit ${expected_rc}, got ${rc}: ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}${err}" PARENT_SCOPE)
endfunction()

foreach(cell gru lstm nlru)
  run(0 ${PARARNN} make-case --cell ${cell} --seed 1 --batch 2 --time 64 --d-in 8 --d-h 16
      --out ${WORK}/${cell}.safetensors)
  run(0 ${PARARNN} verify ${WORK}/${cell}.safetensors --json ${WORK}/${cell}.json)
  if(NOT LAST_OUT MATCHES "verdict: Agree")
    message(FATAL_ERROR "verify did not print Agree for ${cell}:\n${LAST_OUT}")
  endif()
  file(READ ${WORK}/${cell}.json report)
  string(JSON verdict GET "${report}" verdict)
  if(NOT verdict STREQUAL "Agree")
    message(FATAL_ERROR "JSON verdict ${verdict} for ${cell}")
  endif()
endforeach()

# A perturbed trajectory: the oracle's H in f32 with one element moved by 0.05, far outside τ.
run(0 ${PARARNN} make-case --cell gru --seed 2 --batch 1 --time 16 --d-in 3 --d-h 4 --dtype f64
    --out ${WORK}/small.safetensors)
run(0 ${PARARNN} oracle ${WORK}/small.safetensors --out ${WORK}/oracle.safetensors)
run(0 ${PARARNN} solve ${WORK}/small.safetensors --out ${WORK}/solved.safetensors)
run(0 ${PARARNN} compare ${WORK}/small.safetensors --trajectory ${WORK}/solved.safetensors)
# Plant an error into the f64 oracle file: element (0, 11, 2) is at byte offset
# 8 + header + 8 * (11 * 4 + 2). Rewrite with a tiny CMake-side patch: read header length.
file(READ ${WORK}/oracle.safetensors header_len_hex LIMIT 8 HEX)
string(SUBSTRING "${header_len_hex}" 0 2 b0)
string(SUBSTRING "${header_len_hex}" 2 2 b1)
math(EXPR header_len "0x${b1}${b0}")
math(EXPR offset "8 + ${header_len} + 8 * (11 * 4 + 2)")
file(READ ${WORK}/oracle.safetensors all_hex HEX)
math(EXPR hex_pos "${offset} * 2")
# Overwrite the double with 2.0 (0x4000000000000000, little endian); |H| < 1 for a GRU.
string(SUBSTRING "${all_hex}" 0 ${hex_pos} before)
math(EXPR after_pos "${hex_pos} + 16")
string(SUBSTRING "${all_hex}" ${after_pos} -1 after)
set(patched "${before}0000000000000040${after}")
string(LENGTH "${patched}" patched_len)
math(EXPR bytes "${patched_len} / 2")
# Write the bytes back through a hex-decoding loop (CMake has no binary write: use a helper file).
set(bin "${WORK}/perturbed.safetensors")
file(WRITE ${bin} "")
string(REGEX MATCHALL ".." pairs "${patched}")
set(chunk "")
set(n 0)
foreach(pair IN LISTS pairs)
  string(APPEND chunk "\\x${pair}")
endforeach()
execute_process(COMMAND printf "${chunk}" OUTPUT_FILE ${bin} RESULT_VARIABLE prc)
run(1 ${PARARNN} compare ${WORK}/small.safetensors --trajectory ${bin} --json ${WORK}/cmp.json)
file(READ ${WORK}/cmp.json report)
string(JSON t GET "${report}" worst_index t)
string(JSON c GET "${report}" worst_index channel)
string(JSON mism GET "${report}" mismatches)
if(NOT t EQUAL 11 OR NOT c EQUAL 2 OR NOT mism EQUAL 1)
  message(FATAL_ERROR "compare did not find the planted error at t=11 channel=2: t=${t} c=${c} mismatches=${mism}")
endif()

# Refused input: a truncated case file and an unknown backend.
file(WRITE ${WORK}/truncated.safetensors "\x10\x00\x00")
run(2 ${PARARNN} verify ${WORK}/truncated.safetensors)
run(2 ${PARARNN} verify ${WORK}/gru.safetensors --backend warp)
if(NOT LAST_OUT MATCHES "scan_backend")
  message(FATAL_ERROR "the refusal does not name the argument:\n${LAST_OUT}")
endif()
run(0 ${PARARNN} env)
message(STATUS "cli end-to-end: all claims hold")
