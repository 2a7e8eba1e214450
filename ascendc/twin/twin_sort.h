// Twin of Sort32 (Atlas A2/A3), with its documented semantics: each of `repeatTimes` groups of
// 32 (score, index) elements is sorted by descending score; equal scores keep their order (the
// lower position first); groups are not merged with each other. dst holds 8-byte structures,
// the float score in the low 4 bytes and the uint32 index in the high 4 bytes, so a group takes
// 64 floats of dst. The order of NaN scores is not documented: the twin rejects them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "twin_vector.h"

namespace AscendC {

template <typename T>
void Sort32(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<uint32_t>& src1,
            const int32_t repeatTimes) {
  static_assert(std::is_same_v<T, float>, "the twin models Sort32 for float scores");
  const char* op = "Sort32";
  twin::Require(repeatTimes >= 0 && repeatTimes <= 255,
                [&] { return twin::Cat(op, ": repeatTimes ", repeatTimes, " outside [0, 255]"); });
  if (twin::VecNop(static_cast<uint64_t>(repeatTimes), op)) return;
  const auto n = static_cast<uint32_t>(32 * repeatTimes);
  const float* score = twin::VecSrc(src0, n, op);
  const uint32_t* index = twin::VecSrc(src1, n, op);
  float* out = twin::VecDst(dst, 2 * n, op);
  twin::CountVector(n);
  for (int32_t r = 0; r < repeatTimes; ++r) {
    const uint32_t base = 32 * static_cast<uint32_t>(r);
    uint32_t order[32];
    std::iota(order, order + 32, 0u);
    for (uint32_t i = 0; i < 32; ++i) {
      twin::Require(!std::isnan(score[base + i]), [&] {
        return twin::Cat(op, ": NaN score at element ", base + i, " (its order is not documented)");
      });
    }
    std::stable_sort(order, order + 32, [&](uint32_t a, uint32_t b) { return score[base + a] > score[base + b]; });
    for (uint32_t i = 0; i < 32; ++i) {
      out[2 * (base + i)] = score[base + order[i]];
      std::memcpy(&out[2 * (base + i) + 1], &index[base + order[i]], sizeof(uint32_t));
    }
  }
}

}  // namespace AscendC
