# Test taxonomy (docs/testing.md): labels resource host|cuda, kind unit|property|golden,
# cost fast|nightly. GPU test executables exit 77 without a device (SKIP_RETURN_CODE), or fail
# when PARARNN_REQUIRE_CUDA=1.
if(PARARNN_BUILD_TESTS)
  enable_testing()
  include(GoogleTest)
endif()
set(PARARNN_TEST_ARTIFACTS_DIR "${CMAKE_BINARY_DIR}/test-artifacts")

# pararnn_add_test(NAME <name> SOURCES ... LIBS ... RESOURCE host|cuda KIND unit|property|golden
#                  COST fast|nightly [TIMEOUT s] [LABELS extra...])
function(pararnn_add_test)
  cmake_parse_arguments(T "" "NAME;RESOURCE;KIND;COST;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT PARARNN_BUILD_TESTS)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest rapidcheck rapidcheck_gtest)
  set(env "PARARNN_TEST_ARTIFACTS=${PARARNN_TEST_ARTIFACTS_DIR}")
  if(T_RESOURCE STREQUAL "cuda")
    # Every GPU test case is its own ctest test (listing never touches the CUDA runtime, see
    # kernels/src/cuda_test_main.cpp): discovered at build time, so that the build folder that
    # travels to the GPU machine needs no CMake module there; each case exits 77 without a device
    # (or fails with PARARNN_REQUIRE_CUDA=1) and holds the GPU lock while it runs.
    target_link_libraries(${T_NAME} PRIVATE pararnn_cuda_test_main)
    # The executable's name prefixes every case: the same claims are built for the host too
    # (gradient_tests_host / gradient_tests_cuda), and ctest names must be unique.
    gtest_discover_tests(${T_NAME} DISCOVERY_MODE POST_BUILD TEST_LIST ${T_NAME}_TESTS TEST_PREFIX "${T_NAME}:"
      PROPERTIES TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${env}" SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
    set(resource_labels "cuda")
  else()
    target_link_libraries(${T_NAME} PRIVATE GTest::gtest_main)
    gtest_discover_tests(${T_NAME} DISCOVERY_MODE PRE_TEST TEST_LIST ${T_NAME}_TESTS
      PROPERTIES TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${env}")
    set(resource_labels "host")
  endif()
  # Discovered tests cannot take a list-valued property through gtest_discover_tests: label
  # them from an include file that runs after the discovery script.
  set(extra_labels "")
  foreach(label IN LISTS T_LABELS)
    string(APPEND extra_labels ";${label}")
  endforeach()
  set(label_script "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_labels.cmake")
  file(WRITE "${label_script}"
       "foreach(t IN LISTS ${T_NAME}_TESTS)\n"
       "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${resource_labels};${T_KIND};${T_COST}${extra_labels}\")\n"
       "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${label_script}")
endfunction()
