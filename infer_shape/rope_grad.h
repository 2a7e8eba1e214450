// Shape rules of `rope_grad` (docs/contract.md section 1): the rules of `rope` (its `mode` changes no
// shape; its readers parse it, op_table.h).
#pragma once

#include <vector>

#include "rope.h"

namespace mgo::infer {

inline InferResult rope_grad(const std::vector<TensorDesc>& in, const table::RopeGrad::Attrs& /*mode*/) {
  using In = table::RopeGrad::In;
  return rope_family<table::RopeGrad>(in, In::kQGrad, In::kKGrad);
}

}  // namespace mgo::infer
