// CPU AOT kernel of `rope_grad` (docs/contract.md section 1): ATB parity (`mode="atb"`) or the exact VJP of
// `rope` (`mode="vjp"`).
#include "../infer_shape/rope_grad.h"

#include "aot_adapter.h"
#include "rope_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;
using mgo::cpu::HalfMix;
using mgo::cpu::kRopeHalf;

namespace {

// ATB: g * (cos + cat(sin_hi, -sin_lo)), element-wise.
void atb_mix(const float* c, const float* s, HalfMix& m) {
  for (int64_t i = 0; i < kRopeHalf; ++i) {
    const int64_t j = i + kRopeHalf;
    m.a[i] = c[i] + s[j];
    m.b[i] = 0.0f;
    m.c[i] = c[j] - s[i];
    m.d[i] = 0.0f;
  }
}

// VJP: dx_lo = g_lo*c_lo + g_hi*s_hi, dx_hi = g_hi*c_hi - g_lo*s_lo.
void vjp_mix(const float* c, const float* s, HalfMix& m) {
  for (int64_t i = 0; i < kRopeHalf; ++i) {
    const int64_t j = i + kRopeHalf;
    m.a[i] = c[i];
    m.b[i] = s[j];
    m.c[i] = c[j];
    m.d[i] = -s[i];
  }
}

struct RopeGradOp {
  static constexpr int kInputs = 5;
  static mgo::infer::InferResult Infer(const std::vector<mgo::infer::TensorDesc>& in, AotExtra* extra) {
    return mgo::infer::rope_grad(in, {extra->GetAttrStr("mode")});
  }
  static void Run(const mgo::aot::KernelArgs& args, AotExtra* extra) {
    const auto mode = mgo::infer::parse_rope_grad_mode(extra->GetAttrStr("mode"));
    mgo::cpu::run_rope_family("rope_grad", args, mode == mgo::infer::RopeGradMode::kAtb ? atb_mix : vjp_mix);
  }
};

}  // namespace

extern "C" std::vector<std::vector<int64_t>> RopeGradInferShape(int* ndims, int64_t** shapes, AotExtra* extra) {
  return mgo::aot::InferShape<RopeGradOp>(ndims, shapes, extra);
}
extern "C" std::vector<TypeId> RopeGradInferType(std::vector<TypeId> types, AotExtra* extra) {
  return mgo::aot::InferType<RopeGradOp>(types, extra);
}
extern "C" int RopeGrad(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void*,
                        void* extra) {
  return mgo::aot::Launch<RopeGradOp>(nparam, params, ndims, shapes, dtypes, extra);
}
