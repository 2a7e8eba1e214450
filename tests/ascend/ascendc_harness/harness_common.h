// Shared glue of the ctypes-facing harness libraries: exception -> error code + message, GM
// buffer registration for one launch, and per-launch statistics for the Python tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "harness_args.h"  // RunInfo, the call structs (generated)
#include "../../ascendc/common/tiling_common.h"

namespace harness {

enum Status : int { kOk = 0, kTwinRule = 1, kOtherError = 2, kTilingError = 3 };

inline void CopyMessage(const std::string& msg, char* err, int64_t err_len) {
  if (err == nullptr || err_len <= 0) return;
  const auto n = static_cast<size_t>(std::min<int64_t>(err_len - 1, static_cast<int64_t>(msg.size())));
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Whether a pure tiling refused the call (`result`: {ok, error, ...}); its static text is then
// copied into `err`.
template <typename Result>
bool Refused(const Result& result, char* err, int64_t err_len) {
  if (!result.ok) CopyMessage(result.error, err, err_len);
  return !result.ok;
}

// Runs `body`, turning exceptions into a status code and message: a twin rule must reach the
// Python test as text, never abort the interpreter. An attribute outside its (Ascend) domain is
// the op_host's refusal before any tiling (ToAttrs, harness_args.h): a tiling error to the tests.
template <typename Body>
int Guarded(char* err, int64_t err_len, Body&& body) {
  try {
    return body();
  } catch (const AscendC::twin::TwinError& e) {
    CopyMessage(e.what(), err, err_len);
    return kTwinRule;
  } catch (const mgo::infer::ValueError& e) {
    CopyMessage(e.what(), err, err_len);
    return kTilingError;
  } catch (const std::exception& e) {
    CopyMessage(e.what(), err, err_len);
    return kOtherError;
  }
}

// Whether the harnesses hide the lengths' values from the pure tilings (twin_hide_lengths), as
// the op_host does (they live on the device): the row split is then by count.
inline bool& LengthsHidden() {
  static bool hidden = false;
  return hidden;
}

// The NPU architecture a Python call names (__NPU_ARCH__: 2201 or 3510).
inline AscendC::twin::Arch ArchOf(int64_t arch) {
  if (!AscendC::twin::ValidArch(arch)) {
    throw std::invalid_argument("NPU arch " + std::to_string(arch) + " is not modelled (2201 or 3510)");
  }
  return static_cast<AscendC::twin::Arch>(arch);
}

// The platform a call on NPU arch `arch` tiles for: that SoC's (tiling_common.h) with the call's
// AI core count and UB budget.
inline mgo::tiling::CubePlatform CubePlatformOf(int64_t arch, int64_t core_num, int64_t ub_bytes) {
  mgo::tiling::CubePlatform p =
      ArchOf(arch) == AscendC::twin::Arch::k2201 ? mgo::tiling::kAtlasA2Platform : mgo::tiling::kAscend950Platform;
  p.aicNum = static_cast<uint32_t>(core_num);
  p.ubBytes = static_cast<uint64_t>(ub_bytes);
  return p;
}

// Registers GM buffers for one launch and forgets them afterwards, also on exceptions.
class GmScope {
 public:
  GmScope() { AscendC::twin::GmRegistry::Instance().Clear(); }
  GmScope(const GmScope&) = delete;
  GmScope& operator=(const GmScope&) = delete;
  ~GmScope() { AscendC::twin::GmRegistry::Instance().Clear(); }
  void Input(const void* p, uint64_t bytes, const char* name) {
    AscendC::twin::GmRegistry::Instance().Add(p, bytes, name, false);
  }
  void Output(void* p, uint64_t bytes, const char* name) {
    AscendC::twin::GmRegistry::Instance().Add(p, bytes, name, true);
  }
  // Scratch GM of a mixed launch: reading bytes no core wrote is a twin error.
  void Workspace(void* p, uint64_t bytes, const char* name) {
    AscendC::twin::GmRegistry::Instance().Add(p, bytes, name, false, AscendC::twin::GmKind::kWorkspace);
  }
};

inline void FillWriteStats(RunInfo* info) {
  int64_t lo = 255;
  int64_t hi = 0;
  for (const auto& b : AscendC::twin::GmRegistry::Instance().Buffers()) {
    if (!b.track_writes) continue;
    for (const uint8_t c : b.write_count) {
      lo = std::min<int64_t>(lo, c);
      hi = std::max<int64_t>(hi, c);
    }
  }
  info->min_writes = hi == 0 && lo == 255 ? 0 : lo;
  info->max_writes = hi;
}

// The tiling struct travels to the kernel through GM, as the framework does it.
template <typename Tiling>
std::vector<uint8_t> TilingBytes(const Tiling& t) {
  std::vector<uint8_t> bytes(sizeof(Tiling));
  std::memcpy(bytes.data(), &t, sizeof(Tiling));
  return bytes;
}

// "a,b,c": the keys of a name -> snippet map, for the Python tests to check their lists.
template <typename Map>
std::string JoinNames(const Map& snippets) {
  std::string names;
  for (const auto& entry : snippets) names += (names.empty() ? "" : ",") + entry.first;
  return names;
}

// Per-core row ranges of a split, for the tiling-invariant tests.
inline void WriteRanges(uint32_t used, uint32_t base, uint32_t remainder, int64_t* starts, int64_t* counts) {
  for (uint32_t c = 0; c < used; ++c) {
    const auto r = mgo::tiling::CoreRows(base, remainder, c);
    starts[c] = static_cast<int64_t>(r.start);
    counts[c] = static_cast<int64_t>(r.count);
  }
}

}  // namespace harness
