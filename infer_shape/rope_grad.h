// Shape rules of `rope_grad` (docs/contract.md section 1): the rules of `rope`, plus the `mode` attribute.
#pragma once

#include <string>
#include <vector>

#include "rope.h"

namespace mgo::infer {

enum class RopeGradMode { kAtb, kVjp };

inline RopeGradMode parse_rope_grad_mode(const std::string& mode) {
  if (mode == "atb") return RopeGradMode::kAtb;
  if (mode == "vjp") return RopeGradMode::kVjp;
  Checker("rope_grad").value_error("attribute 'mode' must be \"atb\" or \"vjp\", got \"" + mode + "\"");
}

inline InferResult rope_grad(const std::vector<TensorDesc>& in, const table::RopeGrad::Attrs& attrs) {
  using In = table::RopeGrad::In;
  parse_rope_grad_mode(attrs.mode);
  return rope_family<table::RopeGrad>(in, In::kQGrad, In::kKGrad);
}

}  // namespace mgo::infer
