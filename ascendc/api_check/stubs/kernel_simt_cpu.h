// Stand-in for CANN's closed kernel_simt_cpu.h: the CPU-debug library's model of SIMT warps and
// thread blocks, as the open simt_api headers (3510) call it.
#pragma once
#include <cstdint>

class Warp {
 public:
  // Defined (trivially): the callers pass lambdas, and a function of a local type must have a body.
  template <typename T, typename Op>
  T WarpOp(T value, Op) {
    return value;
  }
  template <typename T>
  T WarpShuffleOp(T value, uint32_t, int32_t) {
    return value;
  }
};

class ThreadBlock {
 public:
  static ThreadBlock& GetBlockInstance();
  template <typename Op>
  void AtomicOp(Op op) {
    op();
  }
  Warp warps_[32];
};
