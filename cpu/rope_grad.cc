// CPU AOT kernel of `rope_grad` (docs/contract.md section 1): ATB parity (`mode="atb"`) or the exact VJP of
// `rope` (`mode="vjp"`).
#include "../infer_shape/rope_grad.h"

#include "op_kernels.h"
#include "rope_common.h"

namespace mgo::cpu {
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

}  // namespace

namespace kernels {

void rope_grad(const aot::KernelArgs& args, const table::RopeGrad::Attrs& attrs) {
  using Op = table::RopeGrad;
  const RopeSlots slots{Op::In::kQGrad, Op::In::kKGrad, Op::In::kCos, Op::In::kSin, Op::In::kQSeqLen,
                        Op::OutParam::kQGradOut, Op::OutParam::kKGradOut};
  run_rope_family(Op::kName, args, slots, attrs.mode == table::Mode::kAtb ? atb_mix : vjp_mix);
}

}  // namespace kernels
}  // namespace mgo::cpu
