// See seq_lengths.h.
#include "seq_lengths.h"

#include <stdexcept>
#include <string>

namespace mgo::cpu {
namespace {

// The values of lengths parameter i (int32 or int64).
std::vector<int64_t> values(const aot::KernelArgs& args, int i) {
  const int64_t n = args.numel(i);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    v[j] = args.dtype(i) == infer::DType::kInt64 ? args.as<const int64_t>(i)[j] : args.as<const int32_t>(i)[j];
  }
  return v;
}

std::runtime_error error(const char* op, const std::string& what) {
  return std::runtime_error(std::string(op) + ": " + what);
}

// TND: cumulative lengths (no leading 0) of parameter i -> batch starts and lengths.
void cumulative(const char* op, const char* arg, const aot::KernelArgs& args, int i, int64_t total,
                std::vector<int64_t>& start, std::vector<int64_t>& len) {
  int64_t prev = 0;
  const std::vector<int64_t> v = values(args, i);
  for (size_t j = 0; j < v.size(); ++j) {
    if (v[j] < prev) {
      throw error(op, std::string(arg) + " must be non-decreasing cumulative lengths (>= 0) in TND layout, got " + arg +
                          "[" + std::to_string(j) + "] = " + std::to_string(v[j]) + " after " + std::to_string(prev));
    }
    start.push_back(prev);
    len.push_back(v[j] - prev);
    prev = v[j];
  }
  if (prev != total) {
    throw error(op, "the last entry of " + std::string(arg) + " (" + std::to_string(prev) +
                        ") must equal the number of tokens " + std::to_string(total));
  }
}

// BSND: per-batch lengths of parameter i (absent: all `s`) over `batch` padded rows of `s`.
void per_batch(const char* op, const char* arg, const aot::KernelArgs& args, int i, int64_t batch, int64_t s,
               std::vector<int64_t>& start, std::vector<int64_t>& len) {
  const bool given = args.numel(i) > 0;
  const std::vector<int64_t> v = values(args, i);
  if (given && static_cast<int64_t>(v.size()) != batch) {
    throw error(op, std::string(arg) + " must have one entry per batch in BSND layout (B = " + std::to_string(batch) +
                        "), got " + std::to_string(v.size()));
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = given ? v[b] : s;
    if (n < 0 || n > s) {
      throw error(op, std::string(arg) + "[" + std::to_string(b) + "] = " + std::to_string(n) +
                          " must be in [0, " + std::to_string(s) + "] in BSND layout (the valid length of a batch "
                          "row of " + std::to_string(s) + ")");
    }
    start.push_back(b * s);
    len.push_back(n);
  }
}

}  // namespace

std::vector<int32_t> Batches::row_batches(int64_t t1) const {
  std::vector<int32_t> rb(static_cast<size_t>(t1), -1);
  for (int64_t b = 0; b < count(); ++b) {
    for (int64_t t = q0[b]; t < q0[b] + q_len[b]; ++t) rb[t] = static_cast<int32_t>(b);
  }
  return rb;
}

Batches read_batches(const char* op, const aot::KernelArgs& args, bool bsnd, int64_t batch, int64_t t1, int64_t t2,
                     int lens_q, int lens_kv, const char* kv_arg) {
  Batches out;
  if (bsnd) {
    per_batch(op, "actual_seq_lengths_query", args, lens_q, batch, batch > 0 ? t1 / batch : 0, out.q0, out.q_len);
    per_batch(op, kv_arg, args, lens_kv, batch, batch > 0 ? t2 / batch : 0, out.kv0, out.kv_len);
    return out;
  }
  if (args.numel(lens_q) == 0 && args.numel(lens_kv) == 0) {
    return {{0}, {t1}, {0}, {t2}};
  }
  if (args.numel(lens_q) != args.numel(lens_kv)) {
    throw error(op, std::string("actual_seq_lengths_query and ") + kv_arg +
                        " must have the same number of batches, got " + std::to_string(args.numel(lens_q)) + " and " +
                        std::to_string(args.numel(lens_kv)));
  }
  cumulative(op, "actual_seq_lengths_query", args, lens_q, t1, out.q0, out.q_len);
  cumulative(op, kv_arg, args, lens_kv, t2, out.kv0, out.kv_len);
  return out;
}

}  // namespace mgo::cpu
