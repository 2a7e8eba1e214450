// Stand-in for the tiling header CANN's op compiler generates for each kernel and force-includes
// (asc-devkit tools/build/asc_op_compile_base/adapter/get_op_tiling.py). Its GET_TILING_DATA declares
// the struct that REGISTER_TILING_DEFAULT names, copied out of GM. The compiler finds that struct in
// a precompile pass; scripts/check_ascend_api.py reads it from the kernel source instead and passes
// it as MGO_TILING_STRUCT.
#pragma once
#include <cstdint>

#include "stub_def.h"

template <class T>
__aicore__ inline void InitTilingData(const __gm__ uint8_t* tiling, T* out);

#define GET_TILING_DATA(tiling_data, tiling_arg) \
  MGO_TILING_STRUCT tiling_data;                 \
  InitTilingData<MGO_TILING_STRUCT>(tiling_arg, &tiling_data)
