// Twin of further element-wise vector ops (Ascend C "first `count` elements" form), with the
// documented math: Relu(x) = max(x, 0), Maxs(x, s) = max(x, s), Mins(x, s) = min(x, s),
// Ln(x) = natural logarithm (-inf at 0, NaN below). Same operand rules as twin_vector.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "twin_vector.h"

namespace AscendC {

template <typename T>
void Relu(const LocalTensor<T>& dst, const LocalTensor<T>& a, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Relu"), "Relu", [](T x) { return x > T(0) ? x : T(0); });
}
template <typename T>
void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& a, const T& scalar, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Maxs"), "Maxs", [scalar](T x) { return x > scalar ? x : scalar; });
}
template <typename T>
void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& a, const T& scalar, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Mins"), "Mins", [scalar](T x) { return x < scalar ? x : scalar; });
}
template <typename T>
void Ln(const LocalTensor<T>& dst, const LocalTensor<T>& a, const int32_t& count) {
  twin::Unary(dst, a, twin::Count(count, "Ln"), "Ln", [](T x) { return std::log(x); });
}

}  // namespace AscendC
