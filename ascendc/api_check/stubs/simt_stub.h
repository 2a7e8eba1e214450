// Stand-in for CANN's closed CPU-debug simt_stub.h: the SIMT (CUDA-like) types and built-in
// variables the open simt_api headers use on 3510. Declarations only (see stub_def.h).
#pragma once
#include <cstdint>

#include "stub_def.h"

// SIMT (CUDA-like) vector types: T with N lanes named x, y, z, w (all four declared whatever N).
template <typename T, int N>
struct SimtVector {
  T x, y, z, w;
};
using char1 = SimtVector<int8_t, 1>;
using char2 = SimtVector<int8_t, 2>;
using char3 = SimtVector<int8_t, 3>;
using char4 = SimtVector<int8_t, 4>;
using uchar1 = SimtVector<uint8_t, 1>;
using uchar2 = SimtVector<uint8_t, 2>;
using uchar3 = SimtVector<uint8_t, 3>;
using uchar4 = SimtVector<uint8_t, 4>;
using short1 = SimtVector<int16_t, 1>;
using short2 = SimtVector<int16_t, 2>;
using short3 = SimtVector<int16_t, 3>;
using short4 = SimtVector<int16_t, 4>;
using ushort1 = SimtVector<uint16_t, 1>;
using ushort2 = SimtVector<uint16_t, 2>;
using ushort3 = SimtVector<uint16_t, 3>;
using ushort4 = SimtVector<uint16_t, 4>;
using int1 = SimtVector<int32_t, 1>;
using int2 = SimtVector<int32_t, 2>;
using int3 = SimtVector<int32_t, 3>;
using int4 = SimtVector<int32_t, 4>;
using uint1 = SimtVector<uint32_t, 1>;
using uint2 = SimtVector<uint32_t, 2>;
using uint3 = SimtVector<uint32_t, 3>;
using uint4 = SimtVector<uint32_t, 4>;
using long1 = SimtVector<long, 1>;
using long2 = SimtVector<long, 2>;
using long3 = SimtVector<long, 3>;
using long4 = SimtVector<long, 4>;
using ulong1 = SimtVector<unsigned long, 1>;
using ulong2 = SimtVector<unsigned long, 2>;
using ulong3 = SimtVector<unsigned long, 3>;
using ulong4 = SimtVector<unsigned long, 4>;
using longlong1 = SimtVector<long long, 1>;
using longlong2 = SimtVector<long long, 2>;
using longlong3 = SimtVector<long long, 3>;
using longlong4 = SimtVector<long long, 4>;
using ulonglong1 = SimtVector<unsigned long long, 1>;
using ulonglong2 = SimtVector<unsigned long long, 2>;
using ulonglong3 = SimtVector<unsigned long long, 3>;
using ulonglong4 = SimtVector<unsigned long long, 4>;
using float1 = SimtVector<float, 1>;
using float2 = SimtVector<float, 2>;
using float3 = SimtVector<float, 3>;
using float4 = SimtVector<float, 4>;
using half2 = SimtVector<half, 2>;

namespace cce {
struct dim3 {
  uint32_t x = 1, y = 1, z = 1;
};
// Launches a SIMT function on threadNums threads (the CPU-debug library runs them).
template <auto funcPtr, typename... Args>
void async_invoke(dim3 threadNums, Args... args);
}  // namespace cce

// The SIMT built-in variables of the running thread.
extern cce::dim3 threadIdx;
extern cce::dim3 blockIdx;
extern cce::dim3 blockDim;
extern cce::dim3 gridDim;
extern int32_t warpSize;
