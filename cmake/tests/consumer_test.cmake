# The consumer test of the installed package (ctest `cmake_package_consumer`): installs the
# build in BUILD_DIR into a fresh prefix under WORK_DIR, writes the first ```cmake block of
# docs/cmake.md as a project's CMakeLists.txt beside examples/quickstart.cpp, configures it
# with only that prefix on CMAKE_PREFIX_PATH (find_package(pararnn CONFIG REQUIRED)), builds it
# and runs it: exit 0 only when the quick start's case is verified Agree. Then the installed CLI
# itself, as a user starts it: prefix/bin/pararnn with a clean environment (env -i: no
# LD_LIBRARY_PATH, only the system PATH) makes a case and verifies it Agree; its RUNPATH names
# $ORIGIN/../lib, so it finds the installed shared libraries (libpararnn_kernels.so of a CUDA
# build) wherever the prefix is (issue 58).
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER READELF)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (exit ${rc})\n${out}\n${err}")
  endif()
  message(STATUS "consumer test: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(project_dir "${WORK_DIR}/project")
file(MAKE_DIRECTORY "${project_dir}")

file(READ "${SOURCE_DIR}/docs/cmake.md" doc)
string(REGEX MATCH "```cmake\n([^`]*)```" block "${doc}")
if(NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "consumer test: docs/cmake.md has no ```cmake block")
endif()
file(WRITE "${project_dir}/CMakeLists.txt" "${CMAKE_MATCH_1}")
file(COPY "${SOURCE_DIR}/examples/quickstart.cpp" DESTINATION "${project_dir}")

run_step("install into ${prefix}" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/lib/cmake/pararnn/pararnnConfig.cmake"
   OR NOT EXISTS "${prefix}/lib/cmake/pararnn/pararnnConfigVersion.cmake")
  message(FATAL_ERROR "consumer test: the install left no pararnnConfig.cmake / pararnnConfigVersion.cmake")
endif()
run_step("configure the consumer" ${CMAKE_COMMAND} -S "${project_dir}" -B "${project_dir}/build" -G "${GENERATOR}"
         -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
run_step("build the consumer" ${CMAKE_COMMAND} --build "${project_dir}/build")
run_step("run the quick start" "${project_dir}/build/quickstart")
if(NOT step_output MATCHES "\"verdict\": \"Agree\"")
  message(FATAL_ERROR "consumer test: the quick start printed no Agree verdict:\n${step_output}")
endif()

# The installed CLI (issue 58): an install RPATH of $ORIGIN/../lib, and it starts and judges with
# a clean environment.
set(cli "${prefix}/bin/pararnn")
if(NOT EXISTS "${cli}")
  message(FATAL_ERROR "consumer test: the install left no ${cli}")
endif()
run_step("read the installed CLI's dynamic section" "${READELF}" -d "${cli}")
if(NOT step_output MATCHES "(RUNPATH|RPATH)[^\n]*\\$ORIGIN/\\.\\./lib")
  message(FATAL_ERROR "consumer test: ${cli} has no RUNPATH $ORIGIN/../lib (the installed libraries are not found "
                      "without LD_LIBRARY_PATH):\n${step_output}")
endif()
set(clean env -i PATH=/usr/bin:/bin)
run_step("installed pararnn make-case (clean environment)" ${clean} "${cli}" make-case --cell gru --seed 1 --batch 2
         --time 32 --d-in 4 --d-h 8 --out "${WORK_DIR}/case.safetensors")
run_step("installed pararnn verify (clean environment)" ${clean} "${cli}" verify "${WORK_DIR}/case.safetensors"
         --json "${WORK_DIR}/verify.json")
file(READ "${WORK_DIR}/verify.json" verify_json)
string(JSON verdict GET "${verify_json}" verdict)
if(NOT verdict STREQUAL "Agree")
  message(FATAL_ERROR "consumer test: the installed pararnn verify said ${verdict}, not Agree")
endif()
