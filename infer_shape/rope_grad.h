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

inline InferResult rope_grad(const std::vector<TensorDesc>& in, const std::string& mode) {
  parse_rope_grad_mode(mode);
  return rope_family("rope_grad", in, "q_grad", "k_grad");
}

}  // namespace mgo::infer
