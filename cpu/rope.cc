// CPU AOT kernel of `rope`: y = x*cos + rotate_half(x)*sin on both q and k (docs/contract.md section 1).
#include "op_kernels.h"
#include "rope_common.h"

namespace mgo::cpu::kernels {

void rope(const aot::KernelArgs& args, const table::Rope::Attrs& /*no attributes*/) {
  using Op = table::Rope;
  // rotate_half(x) = cat(-x_hi, x_lo): y_lo = x_lo*c_lo - x_hi*s_lo, y_hi = x_hi*c_hi + x_lo*s_hi.
  const RopeSlots slots{Op::In::kQ, Op::In::kK, Op::In::kCos, Op::In::kSin, Op::In::kQSeqLen,
                        Op::OutParam::kQEmbed, Op::OutParam::kKEmbed};
  run_rope_family(Op::kName, args, slots, [](const float* c, const float* s, HalfMix& m) {
    for (int64_t i = 0; i < kRopeHalf; ++i) {
      const int64_t j = i + kRopeHalf;
      m.a[i] = c[i];
      m.b[i] = -s[i];
      m.c[i] = c[j];
      m.d[i] = s[j];
    }
  });
}

}  // namespace mgo::cpu::kernels
