// launch_scan_affine for double: S = 1 (diagonal), S = 2 (LSTM) and S = 4 (sLSTM), both
// algorithms, both directions, 16-byte (S <= 2) and scalar channel vectors.
#include "scan.cuh"

PARARNN_INSTANTIATE_SCAN_AFFINE(1, double)
PARARNN_INSTANTIATE_SCAN_AFFINE(2, double)
PARARNN_INSTANTIATE_SCAN_AFFINE(4, double)
