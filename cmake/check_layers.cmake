# Configure-time check of the dependency direction (docs/architecture.md): each layer links only
# layers below it; the solver never sees the oracle or the contracts; the oracle never sees cells.
set(_pararnn_forbidden
  "pararnn_core:pararnn_cell_math;pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_cell_math:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_cells:pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_reference:pararnn_cell_math;pararnn_cells;pararnn_solver;pararnn_contracts;pararnn_kernels"
  "pararnn_kernels:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts"
  "pararnn_solver:pararnn_reference;pararnn_contracts;pararnn_numerics"
  "pararnn_numerics:pararnn_cells;pararnn_reference;pararnn_solver;pararnn_contracts;pararnn_kernels;pararnn_reports"
  "pararnn_contracts:pararnn_reports")
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
