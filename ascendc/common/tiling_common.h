// Pieces shared by every pure tiling function (host) and the kernels (device): dtype codes,
// 32-byte alignment and the balanced split of rows over cores.
// Plain C++17 with no library beyond <cstdint>, so the same header compiles for the host tiling,
// for the Ascend device compiler and for the CPU twin.
#pragma once

#include <cstdint>

#ifndef __aicore__
#define __aicore__  // host build: the device qualifier means nothing here
#endif

namespace mgo::tiling {

// Tiling-key low digit: which 16-bit I/O type the kernel is instantiated for.
enum class DType : uint32_t { kFloat16 = 0, kBFloat16 = 1 };

inline constexpr uint32_t kElemBytes16 = 2;  // both supported I/O types are 16-bit
inline constexpr uint64_t kUbAlignBytes = 32;
inline constexpr uint64_t kDefaultUbBytes = 192 * 1024;  // Atlas A2 vector core UB

__aicore__ inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Rows [start, start + count) of one core.
struct RowRange {
  uint64_t start;
  uint64_t count;
};

// The split every op uses: `used` cores, the first `remainder` of them take `base + 1` rows,
// the others `base`. Invariant: ranges are contiguous, disjoint, cover [0, rows) and differ in
// size by at most one row.
__aicore__ inline RowRange CoreRows(uint64_t base, uint64_t remainder, uint64_t core) {
  const uint64_t extra = core < remainder ? core : remainder;
  return RowRange{core * base + extra, base + (core < remainder ? 1u : 0u)};
}

struct RowSplit {
  uint32_t usedCoreNum;
  uint32_t rowsPerCore;    // base
  uint32_t rowsRemainder;  // cores [0, rowsRemainder) take one row more
};

// Never more cores than rows; at least one core even for zero rows (it then does nothing).
inline RowSplit SplitRows(uint64_t rows, uint32_t core_num) {
  const uint64_t used = rows == 0 ? 1 : (rows < core_num ? rows : core_num);
  return RowSplit{static_cast<uint32_t>(used), static_cast<uint32_t>(rows / used),
                  static_cast<uint32_t>(rows % used)};
}

}  // namespace mgo::tiling
