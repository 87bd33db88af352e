# Writes pararnn/build_info.hpp at build time (cmake -P), so the version line of `pararnn env` and
# of every report's context block names the commit the binary was built from, with "+dirty" when
# tracked files differ from it. configure_file rewrites the header only when its text changes.
# Inputs: SOURCE_DIR, INPUT, OUTPUT, PROJECT_VERSION, CMAKE_CXX_COMPILER_ID, CMAKE_CXX_COMPILER_VERSION.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE PARARNN_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE sha_result)
if(NOT sha_result EQUAL 0 OR NOT PARARNN_GIT_SHA)
  set(PARARNN_GIT_SHA "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND PARARNN_GIT_SHA "+dirty")
  endif()
endif()
configure_file(${INPUT} ${OUTPUT} @ONLY)
