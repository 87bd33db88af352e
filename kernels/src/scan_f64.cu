// launch_scan_affine for double: S = 1 (diagonal) and S = 2 (LSTM), both algorithms, both
// directions, 16-byte and scalar channel vectors.
#include "scan.cuh"

PARARNN_INSTANTIATE_SCAN_AFFINE(1, double)
PARARNN_INSTANTIATE_SCAN_AFFINE(2, double)
