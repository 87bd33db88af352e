// The cpp_bin_float_50 instances of the oracle's BPTT (oracle_gradient_math.hpp): the certifier
// of float128 primaries (f64 cases).
#include "oracle_gradient_math.hpp"

namespace pararnn::reference::detail {

PARARNN_ORACLE_GRADIENT_TEMPLATES(, Bin50)

}  // namespace pararnn::reference::detail
