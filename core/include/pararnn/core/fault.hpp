// Named fault-injection points, for measuring what the test suites catch (docs/testing.md,
// "Fault injection"). A point is one expression in the code it can break:
//   if (PARARNN_FAULT_POINT("dropped_last_update")) skip_the_update(); else apply_update();
// Guarantees: in a production build (CMake option PARARNN_FAULTS off, the default) the macro is
// the constant `false` and names nothing, so the branch it guards is dead code and no symbol of
// this header exists (tests/fault_free_build checks both). In a faults build (PARARNN_FAULTS=ON,
// its own build folder) the point is true exactly when the environment variable PARARNN_FAULT
// names it; the first activation writes "pararnn fault '<name>' injected" to stderr once, so a
// run can prove the fault was reached. The catalog of names, what each models and the suites
// that must catch it: property_tests/faults/catalog.json.
#pragma once

#if defined(PARARNN_FAULTS) && PARARNN_FAULTS && !defined(__CUDA_ARCH__)

namespace pararnn::fault {
// True when PARARNN_FAULT (read once) equals `name`.
bool active(const char* name);
}  // namespace pararnn::fault

#define PARARNN_FAULT_POINT(name) (::pararnn::fault::active(name))
#define PARARNN_FAULTS_COMPILED 1

#else

#define PARARNN_FAULT_POINT(name) false
#define PARARNN_FAULTS_COMPILED 0

#endif
