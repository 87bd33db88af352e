# Configure-time check of the dependency direction (docs/architecture.md): each layer links only
# layers below it; the solver never sees the oracle or the contracts; the oracle never sees cells;
# reports/ reads report.json only (never the solver, the oracle, the judge or the campaign), and
# no library below the CLI links the campaign (pararnn::nightly). A second check reads the
# sources: no file of reports/ includes a header of solver/, reference/, contracts' judge or nightly/.
set(_pararnn_forbidden
  "pararnn_core:pararnn_cell_math;pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_cell_math:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_cells:pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_reference:pararnn_cell_math;pararnn_cells;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_kernels:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts"
  "pararnn_solver:pararnn_reference;pararnn_contracts;pararnn_numerics"
  "pararnn_numerics:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels;pararnn_reports"
  "pararnn_contracts:pararnn_reports;pararnn_nightly"
  "pararnn_reports:pararnn_cell_math;pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels;pararnn_nightly")
foreach(rule IN LISTS _pararnn_forbidden)
  string(REPLACE ":" ";" parts "${rule}")
  list(GET parts 0 target)
  list(REMOVE_AT parts 0)
  if(NOT TARGET ${target})
    continue()
  endif()
  get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
  get_target_property(private_links ${target} LINK_LIBRARIES)
  foreach(bad IN LISTS parts)
    foreach(link IN LISTS links private_links)
      if(link MATCHES "(^|::)${bad}$" OR link MATCHES "pararnn::${bad}$")
        message(FATAL_ERROR "layering: ${target} must not link ${bad} (docs/architecture.md)")
      endif()
      string(REPLACE "pararnn_" "pararnn::" bad_alias "${bad}")
      if(link STREQUAL bad_alias)
        message(FATAL_ERROR "layering: ${target} must not link ${bad_alias} (docs/architecture.md)")
      endif()
    endforeach()
  endforeach()
endforeach()

# Includes: a header is a dependency even when no link says so (a header-only use of the solver
# would pass the link check). reports/ may include core/ and the contract's vocabulary
# (pararnn/contracts/tolerance.hpp, compare.hpp: pararnn::numerics) only.
file(GLOB_RECURSE _pararnn_reports_sources LIST_DIRECTORIES false
     "${PROJECT_SOURCE_DIR}/reports/src/*" "${PROJECT_SOURCE_DIR}/reports/include/*")
foreach(source IN LISTS _pararnn_reports_sources)
  file(STRINGS "${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]pararnn/")
  foreach(line IN LISTS includes)
    if(line MATCHES "pararnn/(solver|reference|cells|kernels|nightly)/" OR
       (line MATCHES "pararnn/contracts/" AND NOT line MATCHES "pararnn/contracts/(tolerance|compare)\\.hpp"))
      file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${source}")
      message(FATAL_ERROR "layering: ${rel} includes '${line}': reports/ reads report.json only and must not "
                          "include the solver, the oracle, the judge or the campaign (docs/architecture.md)")
    endif()
  endforeach()
endforeach()
