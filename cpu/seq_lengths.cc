// See seq_lengths.h.
#include "seq_lengths.h"

#include <stdexcept>
#include <string>

namespace mgo::cpu {
namespace {

// Cumulative lengths (no leading 0) of parameter i -> row starts with a leading 0.
std::vector<int64_t> starts(const char* op, const char* arg, const aot::KernelArgs& args, int i, int64_t total) {
  const int64_t n = args.numel(i);
  std::vector<int64_t> c{0};
  for (int64_t j = 0; j < n; ++j) {
    const int64_t v = args.dtype(i) == infer::DType::kInt64 ? args.as<const int64_t>(i)[j]
                                                             : args.as<const int32_t>(i)[j];
    if (v < c.back()) {
      throw std::runtime_error(std::string(op) + ": " + arg + " must be non-decreasing cumulative lengths (>= 0), "
                               "got " + arg + "[" + std::to_string(j) + "] = " + std::to_string(v) + " after " +
                               std::to_string(c.back()));
    }
    c.push_back(v);
  }
  if (c.back() != total) {
    throw std::runtime_error(std::string(op) + ": the last entry of " + arg + " (" + std::to_string(c.back()) +
                             ") must equal the number of tokens " + std::to_string(total));
  }
  return c;
}

}  // namespace

Batches read_batches(const char* op, const aot::KernelArgs& args, bool bsnd, int64_t batch, int64_t t1, int64_t t2,
                     int lens_q, int lens_kv, const char* kv_arg) {
  Batches out;
  if (bsnd) {
    for (int64_t b = 0; b <= batch; ++b) {
      out.q.push_back(batch > 0 ? b * (t1 / batch) : 0);
      out.kv.push_back(batch > 0 ? b * (t2 / batch) : 0);
    }
    return out;
  }
  if (args.numel(lens_q) == 0 && args.numel(lens_kv) == 0) {
    return {{0, t1}, {0, t2}};
  }
  if (args.numel(lens_q) != args.numel(lens_kv)) {
    throw std::runtime_error(std::string(op) + ": actual_seq_lengths_query and " + kv_arg +
                             " must have the same number of batches, got " + std::to_string(args.numel(lens_q)) +
                             " and " + std::to_string(args.numel(lens_kv)));
  }
  out.q = starts(op, "actual_seq_lengths_query", args, lens_q, t1);
  out.kv = starts(op, kv_arg, args, lens_kv, t2);
  return out;
}

}  // namespace mgo::cpu
