// CPU AOT kernel of `rope`: y = x*cos + rotate_half(x)*sin on both q and k (docs/contract.md section 1).
#include "../infer_shape/rope.h"

#include "aot_adapter.h"
#include "rope_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;

namespace {

struct RopeOp {
  static constexpr int kInputs = 5;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, AotExtra*) {
    return mgo::infer::rope(in, {});
  }
  static void Run(const mgo::aot::KernelArgs& args, AotExtra*);
};

void RopeOp::Run(const mgo::aot::KernelArgs& args, AotExtra*) {
  // rotate_half(x) = cat(-x_hi, x_lo): y_lo = x_lo*c_lo - x_hi*s_lo, y_hi = x_hi*c_hi + x_lo*s_hi.
  mgo::cpu::run_rope_family("rope", args, [](const float* c, const float* s, mgo::cpu::HalfMix& m) {
    for (int64_t i = 0; i < mgo::cpu::kRopeHalf; ++i) {
      const int64_t j = i + mgo::cpu::kRopeHalf;
      m.a[i] = c[i];
      m.b[i] = -s[i];
      m.c[i] = c[j];
      m.d[i] = s[j];
    }
  });
}

}  // namespace

extern "C" std::vector<std::vector<int64_t>> RopeInferShape(int* ndims, int64_t** shapes, AotExtra* extra) {
  return mgo::aot::InferShape<RopeOp>(ndims, shapes, extra);
}
extern "C" std::vector<TypeId> RopeInferType(std::vector<TypeId> types, AotExtra* extra) {
  return mgo::aot::InferType<RopeOp>(types, extra);
}
extern "C" int Rope(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void*, void* extra) {
  return mgo::aot::Launch<RopeOp>(nparam, params, ndims, shapes, dtypes, extra);
}
