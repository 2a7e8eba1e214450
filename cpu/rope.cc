// CPU AOT kernel of `rope`: y = x*cos + rotate_half(x)*sin on both q and k (docs/contract.md section 1).
#include "../infer_shape/rope.h"

#include "rope_common.h"

using mgo::aot::AotExtra;
using mgo::aot::TypeId;

extern "C" std::vector<std::vector<int64_t>> RopeInferShape(int* ndims, int64_t** shapes, AotExtra*) {
  return mgo::infer::rope(mgo::aot::shape_descs(5, ndims, shapes)).shapes;
}

extern "C" std::vector<TypeId> RopeInferType(std::vector<TypeId> types, AotExtra*) {
  return mgo::aot::type_ids(mgo::infer::rope(mgo::aot::type_descs(types)));
}

extern "C" int Rope(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes, void*, void*) {
  const mgo::aot::KernelArgs args(nparam, params, ndims, shapes, dtypes);
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
  return 0;
}
