// CPU twin of the Ascend C `kernel_operator.h` surface used by the kernels in ascendc/*/op_kernel.
// Tests only: it lets the real kernel sources compile with g++ and run on the CPU with Ascend's
// rules (32-byte DMA, UB capacity, queue discipline, pipe syncs) enforced as exceptions
// (AscendC::twin::TwinError). Mixed AIC + AIV launches (twin_mix.h) add cross-core flags,
// SyncAll, atomics, GM race/poison checks and the high-level Matmul object (twin_matmul.h),
// modelled by its documented GEMM semantics. It is not a simulator of timing, nor of the cube's
// low-level L1/L0 fractal chain.
#pragma once

#include <cstdint>

// Ascend C function/address-space qualifiers. They are compiler keywords on the device, so the
// twin has to spell them as (empty) macros.
#define __aicore__
#define __global__
#define __gm__

#define GM_ADDR __gm__ uint8_t*

#include "twin_copy.h"
#include "twin_launch.h"
#include "twin_pipe.h"
#include "twin_sync.h"
#include "twin_tensor.h"
#include "twin_types.h"
#include "twin_vector.h"
#include "twin_vector_math.h"
#include "twin_sort.h"
#include "twin_mix.h"
#include "twin_matmul.h"

// The standard-C++ tiling struct flow (CANN >= 8.0): REGISTER_TILING_DEFAULT names the struct,
// GET_TILING_DATA copies it out of GM, TILING_KEY_IS selects the instantiation the host chose.
// They declare variables in the caller's scope, so they stay macros as on the device.
#define REGISTER_TILING_DEFAULT(TilingStruct) using TwinDefaultTiling_ = TilingStruct
#define GET_TILING_DATA(var, tiling) \
  TwinDefaultTiling_ var = ::AscendC::twin::LoadTiling<TwinDefaultTiling_>(tiling)
#define TILING_KEY_IS(key) (::AscendC::twin::Current().TilingKey() == static_cast<uint64_t>(key))
