#include "rope_common.h"

#include <stdexcept>
#include <string>

namespace mgo::cpu {

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void apply_half_mix(float* row, int64_t heads, const HalfMix& mix) {
  for (int64_t h = 0; h < heads; ++h) {
    float* lo = row + h * kRopeHead;
    float* hi = lo + kRopeHalf;
    for (int64_t i = 0; i < kRopeHalf; ++i) {
      const float xl = lo[i];
      const float xh = hi[i];
      lo[i] = xl * mix.a[i] + xh * mix.b[i];
      hi[i] = xh * mix.c[i] + xl * mix.d[i];
    }
  }
}

namespace {

// What every q_seq_len error adds: rope's lengths are per sequence, unlike the attention ops'
// cumulative actual_seq_lengths; when the values look cumulative (non-decreasing, ending at n_tokens),
// their per-sequence form too. The Python check of list lengths (_checks.py) words it the same.
template <typename I>
std::string per_sequence_hint(const I* lens, int64_t batch, int64_t n_tokens) {
  std::string hint = " (rope's q_seq_len are per-sequence lengths, not cumulative like the attention ops' "
                     "actual_seq_lengths";
  bool cumulative = batch > 1 && lens[0] > 0 && lens[batch - 1] == n_tokens;
  for (int64_t b = 1; cumulative && b < batch; ++b) cumulative = lens[b] >= lens[b - 1];
  if (cumulative) {
    hint += "; these look cumulative: per sequence they are [";
    for (int64_t b = 0; b < batch && b < 8; ++b) {
      hint += (b ? ", " : "") + std::to_string(static_cast<int64_t>(lens[b]) - (b ? lens[b - 1] : 0));
    }
    hint += batch > 8 ? ", ...]" : "]";
  }
  return hint + ")";
}

template <typename I>
std::vector<int32_t> positions(const char* op, const I* lens, int64_t batch, int64_t n_tokens, int64_t max_seq_len) {
  int64_t total = 0;
  for (int64_t b = 0; b < batch; ++b) {
    if (lens[b] <= 0 || lens[b] > max_seq_len) {
      throw std::runtime_error(std::string(op) + ": q_seq_len[" + std::to_string(b) + "] = " +
                               std::to_string(lens[b]) + " must be in [1, max_seq_len = " +
                               std::to_string(max_seq_len) + "]" + per_sequence_hint(lens, batch, n_tokens));
    }
    total += lens[b];
  }
  if (total != n_tokens) {
    throw std::runtime_error(std::string(op) + ": sum(q_seq_len) = " + std::to_string(total) +
                             " must equal n_tokens = " + std::to_string(n_tokens) +
                             per_sequence_hint(lens, batch, n_tokens));
  }
  std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
  int64_t t = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (I i = 0; i < lens[b]; ++i) pos[t++] = static_cast<int32_t>(i);
  }
  return pos;
}

}  // namespace

std::vector<int32_t> rope_positions(const char* op, const aot::KernelArgs& args, int lens_index, int64_t n_tokens,
                                    int64_t max_seq_len) {
  const int64_t batch = args.dim(lens_index, 0);
  if (args.dtype(lens_index) == infer::DType::kInt64) {
    return positions(op, args.as<const int64_t>(lens_index), batch, n_tokens, max_seq_len);
  }
  return positions(op, args.as<const int32_t>(lens_index), batch, n_tokens, max_seq_len);
}

}  // namespace mgo::cpu
