# The installed CMake package `pararnn` (docs/cmake.md): headers, the static libraries and the
# `pararnn` CLI, with pararnnConfig.cmake and a version file, so that a consumer writes
#   find_package(pararnn CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE pararnn::contracts)
# Exported targets: pararnn::core, pararnn::cell_math, pararnn::cells, pararnn::numerics, pararnn::reference,
# pararnn::solver, pararnn::contracts, and pararnn::kernels when the CUDA backend is built
# (pararnn_CUDA is then ON in the consumer). The test `cmake_package_consumer` installs to a
# temporary prefix and builds the quick start of docs/cmake.md against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(pararnn_export_targets pararnn_dlpack pararnn_core pararnn_cell_math pararnn_cells pararnn_numerics pararnn_reference
    pararnn_solver pararnn_contracts)
set(pararnn_include_roots core cells contracts reference solver)
if(PARARNN_HAVE_CUDA)
  list(APPEND pararnn_export_targets pararnn_kernels)
  list(APPEND pararnn_include_roots kernels)
endif()

# The components name their include folders by absolute source paths (the build tree's view);
# the installed package finds every header under one include/ folder instead.
foreach(target IN LISTS pararnn_export_targets)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    continue()
  endif()
  set(wrapped "")
  foreach(dir IN LISTS dirs)
    if(dir MATCHES "^${PROJECT_SOURCE_DIR}/")
      list(APPEND wrapped "$<BUILD_INTERFACE:${dir}>")
    else()
      list(APPEND wrapped "${dir}")  # a system folder (DLPack's): the same in both views
    endif()
  endforeach()
  list(APPEND wrapped "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${wrapped}")
  string(REPLACE "pararnn_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS ${pararnn_export_targets} EXPORT pararnnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS pararnn RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(root IN LISTS pararnn_include_roots)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${root}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()

set(pararnn_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/pararnn)
install(EXPORT pararnnTargets NAMESPACE pararnn:: DESTINATION ${pararnn_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pararnnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pararnnConfig.cmake INSTALL_DESTINATION ${pararnn_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pararnnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pararnnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/pararnnConfigVersion.cmake
        DESTINATION ${pararnn_cmake_dir})

if(PARARNN_BUILD_TESTS)
  # Installs this build into a fresh prefix and builds + runs docs/cmake.md's consumer (its
  # fenced CMakeLists.txt with examples/quickstart.cpp) against it, then the installed CLI with a
  # clean environment (make-case + verify); no GPU needed.
  add_test(NAME cmake_package_consumer
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
                   -DWORK_DIR=${CMAKE_BINARY_DIR}/cmake-consumer -DGENERATOR=${CMAKE_GENERATOR}
                   -DCXX_COMPILER=${CMAKE_CXX_COMPILER} -DREADELF=${CMAKE_READELF}
                   -P ${PROJECT_SOURCE_DIR}/cmake/tests/consumer_test.cmake)
  set_tests_properties(cmake_package_consumer PROPERTIES LABELS "host;golden;fast" TIMEOUT 300)
endif()
