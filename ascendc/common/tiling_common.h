// The neutral core of every pure tiling (host) and kernel (device): dtype codes, 32-byte alignment,
// the balanced split of rows over cores and, for the mixed (cube + vector) kernels, the AI core's
// memories, the Matmul base-block plan and the workspace cursor. Nothing here knows an op.
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

// Splits `rows` over `parts` AIVs into contiguous ranges of (almost) equal size: part i owns
// [start[i], start[i+1]).
inline void SplitEvenly(uint64_t rows, uint32_t parts, uint32_t* start) {
  start[0] = 0;
  for (uint32_t i = 1; i <= parts; ++i) start[i] = static_cast<uint32_t>(rows * i / parts);
}

// A size a backend's kernel bounds beyond the shape rules (op_attrs.h: <OpType>Ascend::<Size>, with
// kMin, kMax and the table's text kError): that text when `value` is outside, else nullptr.
template <typename Limit>
inline const char* OutOfRange(uint64_t value) {
  return value < Limit::kMin || value > Limit::kMax ? Limit::kError : nullptr;
}

// ---------------------------------------------------------------- mixed (cube + vector) kernels
inline constexpr uint32_t kMaxAic = 64;              // tiling arrays hold up to 2*64 AIVs
inline constexpr uint32_t kMaxAiv = 2 * kMaxAic;
inline constexpr uint32_t kCubeAlign = 16;           // cube fractal edge (16 x 16 elements)

// Sizes of one AI core's memories and the AIC count (the blockDim of a mixed launch).
struct CubePlatform {
  uint32_t aicNum;
  uint64_t ubBytes;   // per AIV, as the platform reports it: the budget of a mixed kernel's AIV
  uint64_t l1Bytes;   // per AIC, likewise
  uint64_t l0aBytes;
  uint64_t l0bBytes;
  uint64_t l0cBytes;
};
// What CANN's platform reports on Ascend910B1 (and 910_93): 24 AIC / 48 AIV, UB and L1 256 bytes
// below the ini's 192 KiB / 512 KiB (GetCoreMemSize keeps the Matmul client's message there on
// 910B/910_93: ASC_UB_SIZE = 192 KiB - 256, the UB a mixed kernel may fill), L0A/L0B 64 KiB, L0C
// 128 KiB. The op_host takes the real values from the platform (op_host_platform.h); this is the
// default of the CPU harnesses.
inline constexpr uint64_t kPlatformReservedBytes = 256;
inline constexpr CubePlatform kAtlasA2Platform{24,        192 * 1024 - kPlatformReservedBytes,
                                               512 * 1024 - kPlatformReservedBytes,
                                               64 * 1024, 64 * 1024, 128 * 1024};
// What it reports on Ascend950PR (its SoC ini, as scripts/check_ascend_host.py reads it through CANN's
// platform library): 36 AIC / 72 AIV (the same one-cube-two-vector split), UB 248 KiB with nothing
// kept back (the mixed kernel's AIV fills all of it), L1 512 KiB, L0A/L0B 64 KiB, L0C 256 KiB. The
// twin's default for a launch on NPU arch 3510.
inline constexpr CubePlatform kAscend950Platform{36, 248 * 1024, 512 * 1024, 64 * 1024, 64 * 1024, 256 * 1024};

// The platform's checks every mixed tiling makes first; nullptr when it can be tiled.
inline const char* CheckCubePlatform(const CubePlatform& p) {
  if (p.aicNum == 0) return "core count must be positive";
  if (p.aicNum > kMaxAic) return "more than 64 AI cores: the tiling arrays hold 128 AIVs";
  return nullptr;
}

// AI cores of a launch over `units` work units (two AIVs each): never an idle core, at least one.
inline uint32_t UsedAic(uint64_t units, const CubePlatform& p) {
  const uint64_t want = (units + 1) / 2;
  return static_cast<uint32_t>(want == 0 ? 1 : (want < p.aicNum ? want : p.aicNum));
}

// The result of a mixed tiling: its data (static `error` text when !ok), the user workspace (the
// op_host adds the system workspace) and the largest UB footprint of an AIV.
template <typename Data>
struct TilingResult {
  bool ok;
  const char* error;
  Data data;
  uint64_t workspaceBytes;
  uint64_t ubBytes;
};

// The cube tiling of one Matmul object: the largest problem it is used for (M, N, Ka = Kb) and
// its L0 base block (baseM x baseK of A, baseK x baseN of B, baseM x baseN float32 of C).
struct MatmulTiling {
  uint32_t m;
  uint32_t n;
  uint32_t k;
  uint32_t baseM;
  uint32_t baseN;
  uint32_t baseK;
};

// Largest baseM/baseN/baseK (multiples of 16, not above the aligned problem) whose double
// buffered A and B blocks fit L0A/L0B and whose float32 C block fits L0C.
inline MatmulTiling PlanMatmul(uint64_t m, uint64_t n, uint64_t k, const CubePlatform& p) {
  MatmulTiling t{static_cast<uint32_t>(m), static_cast<uint32_t>(n), static_cast<uint32_t>(k), 0, 0, 0};
  const auto cap = [](uint64_t v, uint64_t lim) { return AlignUp(v < lim ? v : lim, kCubeAlign); };
  uint64_t bm = cap(m, 128);
  uint64_t bn = cap(n, 256);
  uint64_t bk = cap(k, 64);
  while (bm * bn * 4 > p.l0cBytes && bn > kCubeAlign) bn /= 2;
  while (2 * bm * bk * 2 > p.l0aBytes && bk > kCubeAlign) bk /= 2;
  while (2 * bk * bn * 2 > p.l0bBytes && bn > kCubeAlign) bn /= 2;
  t.baseM = static_cast<uint32_t>(AlignUp(bm, kCubeAlign));
  t.baseN = static_cast<uint32_t>(AlignUp(bn, kCubeAlign));
  t.baseK = static_cast<uint32_t>(AlignUp(bk, kCubeAlign));
  return t;
}

// Whether a base block respects L0A/L0B/L0C (double-buffered A/B) and L1 (one A and B block).
__aicore__ inline bool MatmulFits(const MatmulTiling& t, const CubePlatform& p) {
  const uint64_t a = uint64_t{t.baseM} * t.baseK * 2;
  const uint64_t b = uint64_t{t.baseK} * t.baseN * 2;
  const uint64_t c = uint64_t{t.baseM} * t.baseN * 4;
  return t.baseM % kCubeAlign == 0 && t.baseN % kCubeAlign == 0 && t.baseK % kCubeAlign == 0 &&
         2 * a <= p.l0aBytes && 2 * b <= p.l0bBytes && c <= p.l0cBytes && 2 * (a + b) <= p.l1Bytes;
}

// ReduceSum/ReduceMax scratch for `count` floats: one partial per 256-byte repeat, 32-byte aligned.
__aicore__ inline uint32_t ReduceScratchFloats(uint32_t count) {
  const uint32_t partials = (count + 63) / 64;
  return static_cast<uint32_t>(AlignUp(partials, 8));
}

// A workspace cursor: each piece starts on a 512-byte boundary (one cube fractal), so every
// matmul operand starts aligned.
struct WorkspaceCursor {
  uint64_t off = 0;
  uint64_t operator()(uint64_t bytes) {
    const uint64_t at = off;
    off += AlignUp(bytes, 512);
    return at;
  }
};

}  // namespace mgo::tiling
