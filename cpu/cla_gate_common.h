// Shared by the `cla_gate_merge` and `cla_gate_backward` CPU kernels: row blocking and sigmoid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mgo::cpu {

inline float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// d sigmoid / dz = s * (1 - s), computed as s * sigmoid(-z): 1 - s cancels for large z (at z = 7.2
// it loses 11 of float32's 24 bits, at z >= 16.7 s rounds to 1 and the slope to 0).
inline float sigmoid_slope(float z) { return sigmoid(z) * sigmoid(-z); }

// Rows of D elements are processed in blocks of about 2048 elements, so each load/store call
// moves a few KiB (amortising the call) while the three float32 tiles stay in L1.
inline int64_t cla_rows_per_block(int64_t d) { return std::max<int64_t>(1, 2048 / std::max<int64_t>(d, 1)); }

}  // namespace mgo::cpu
