// The NPU architectures the twin models and their per-core resources. A launch picks one
// (`__NPU_ARCH__` 2201: Atlas A2/A3, the default; 3510: Ascend 950) and every capacity check
// follows it. Sources (asc-devkit 82b89a15, read, not copied; docs under docs/zh/guide):
//   * UB / L1 / L0A / L0B / L0C sizes: impl/basic_api/utils/kernel_utils_mode_cpu.h
//     (ConstDefiner::bufferInitLen, the pools the CPU-debug InitBuffer checks against),
//     impl/basic_api/utils/kernel_utils_constants.h (TOTAL_UB_SIZE, TOTAL_L1_SIZE, TOTAL_L0C_SIZE),
//     and the "NPU架构版本2201/3510" spec pages (ASC_UB_SIZE, ASC_L1_SIZE, the reserved bytes);
//   * buffers per TPipe: QBUF_MAX_LEN (impl/basic_api/kernel_macros.h) as TPipe::InitBuffer
//     asserts it (impl/basic_api/kernel_tpipe_impl.h: <= 64; dav_3510/kernel_tpipe_impl_c310.h: < 64);
//   * queue buffers: 2201 keeps one event id per TQue buffer of a TPosition, 8 ids per event
//     type (TQue简介.md "TQue Buffer限制"); 3510 gives every AIV queue buffer a buffer id from
//     0..MAX_MUTEXID = 27 (include/basic_api/kernel_common.h AllocMutexID, impl/basic_api/kernel_event.h).
#pragma once

#include <cstdint>

namespace AscendC::twin {

enum class Arch : int { k2201 = 2201, k3510 = 3510 };

struct ArchSpec {
  Arch arch;
  const char* name;
  uint64_t ub;             // UB bytes a vector-only kernel may InitBuffer
  uint64_t ub_mix;         // ... and an AIV of a mixed (cube + vector) kernel
  uint64_t l1_mix;         // L1 bytes of the AIC in a mixed kernel (the Matmul's buffers)
  uint64_t l0a, l0b, l0c;  // the cube's operand and accumulator buffers
  int max_pipe_buffers;    // buffers (TQue buffers + TBufs) one TPipe may manage
  int queue_buffers_per_position;  // 2201: event ids bound TQue buffers per TPosition; 0 = no such limit
  int queue_buffer_ids;    // 3510: buffer ids bound the TQue buffers of an AIV; 0 = no such limit
  bool zero_count_is_nop;  // a vector op of count / repeatTime 0 is documented as a NOP
  uint64_t ub_stride_max;  // DataCopyPad's UB-side stride (32-byte blocks); 0 = uint32 range
};

// 2201: 192 KiB UB (the CPU-debug pool), minus the 256 bytes the framework reserves in fused
// cube + vector kernels (ASC_UB_SIZE = 192 * 1024 - 256; the Matmul client keeps its message
// at the end of UB); L1 512 KiB minus 256 bytes there too; L0C 128 KiB.
inline constexpr ArchSpec kArch2201{Arch::k2201, "2201 (Atlas A2/A3)", 192 * 1024, 192 * 1024 - 256,
                                    512 * 1024 - 256, 64 * 1024, 64 * 1024, 128 * 1024, 64, 8, 0, true, 0};
// 3510: 256 KiB of UB of which 248 KiB are the kernel's at default compile options
// (ASC_UB_SIZE = 248 * 1024; the rest is the VF stack and the API's reserve, which Exp, Ln,
// Add, Cast, ... use on this arch); L1 512 KiB; L0C 256 KiB. Vector ops are VF functions here:
// count 0 is not guaranteed to be a NOP.
inline constexpr ArchSpec kArch3510{Arch::k3510, "3510 (Ascend 950)", 248 * 1024, 248 * 1024, 512 * 1024,
                                    64 * 1024, 64 * 1024, 256 * 1024, 63, 0, 28, false, 65535};

inline const ArchSpec& SpecOf(Arch a) { return a == Arch::k3510 ? kArch3510 : kArch2201; }

// The architecture numbers the harness passes (2201 or 3510); anything else is a TwinError.
inline bool ValidArch(int64_t a) { return a == 2201 || a == 3510; }

}  // namespace AscendC::twin
