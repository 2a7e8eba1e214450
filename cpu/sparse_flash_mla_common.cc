// See sparse_flash_mla_common.h.
#include "sparse_flash_mla_common.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mgo::cpu::smla {
namespace {

std::runtime_error error(const char* op, const std::string& what) {
  return std::runtime_error(std::string(op) + ": " + what);
}

std::vector<int64_t> values(const aot::KernelArgs& args, int i) {
  const int32_t* v = args.as<const int32_t>(i);
  return std::vector<int64_t>(v, v + args.numel(i));
}

// Per batch: start row and rows available of one source, from its cu_seqlens (TND), or the layout.
void starts(const char* op, const char* arg, const aot::KernelArgs& args, int cu, bool bsnd, int64_t batches,
            int64_t s, int64_t total, std::vector<int64_t>& start, std::vector<int64_t>& avail) {
  start.assign(batches, 0);
  avail.assign(batches, 0);
  if (bsnd) {
    for (int64_t b = 0; b < batches; ++b) start[b] = b * s, avail[b] = s;
    return;
  }
  if (cu < 0 || args.numel(cu) == 0) {  // one sequence of every token
    avail[0] = total;
    return;
  }
  const std::vector<int64_t> v = values(args, cu);
  if (v[0] != 0) throw error(op, std::string(arg) + "[0] must be 0 (cumulative lengths with a leading 0), got " +
                                     std::to_string(v[0]));
  for (int64_t b = 0; b < batches; ++b) {
    if (v[b + 1] < v[b]) {
      throw error(op, std::string(arg) + " must be non-decreasing, got " + arg + "[" + std::to_string(b + 1) +
                          "] = " + std::to_string(v[b + 1]) + " after " + std::to_string(v[b]));
    }
    start[b] = v[b];
    avail[b] = v[b + 1] - v[b];
  }
  if (v[batches] != total) {
    throw error(op, "the last entry of " + std::string(arg) + " (" + std::to_string(v[batches]) +
                        ") must equal the number of tokens " + std::to_string(total));
  }
}

// Per batch: the rows used (seqused_*, at most those available; all without it).
std::vector<int64_t> used(const char* op, const char* arg, const aot::KernelArgs& args, int i,
                          const std::vector<int64_t>& avail) {
  if (args.numel(i) == 0) return avail;
  std::vector<int64_t> v = values(args, i);
  for (size_t b = 0; b < v.size(); ++b) {
    if (v[b] < 0 || v[b] > avail[b]) {
      throw error(op, std::string(arg) + "[" + std::to_string(b) + "] = " + std::to_string(v[b]) + " must be in [0, " +
                          std::to_string(avail[b]) + "], the rows of batch " + std::to_string(b));
    }
  }
  return v;
}

}  // namespace

void fill_geometry(const char* op, const aot::KernelArgs& args, const Slots& s, Problem& p) {
  const int r = p.bsnd ? 4 : 3;
  p.n1 = args.dim(s.q, r - 2);
  p.n2 = args.dim(s.ori, r - 2);
  p.g = p.n1 / p.n2;
  p.d = args.dim(s.q, r - 1);
  p.has_cmp = args.numel(s.cmp) > 0;
  p.k_ori = args.numel(s.ori_idx) > 0 ? args.dim(s.ori_idx, r - 1) : 0;
  p.k_cmp = args.numel(s.cmp_idx) > 0 ? args.dim(s.cmp_idx, r - 1) : 0;
  p.t1 = args.numel(s.q) / (p.n1 * p.d);
  p.t2 = args.numel(s.ori) / (p.n2 * p.d);
  p.t3 = p.has_cmp ? args.numel(s.cmp) / (p.n2 * p.d) : 0;
  p.s1 = p.bsnd ? args.dim(s.q, 1) : 0;
  const int64_t batches = p.bsnd ? args.dim(s.q, 0) : std::max<int64_t>(1, args.numel(s.cu_q) - 1);
  std::vector<int64_t> q0, q_av, o0, o_av, c0, c_av;
  starts(op, "cu_seqlens_q", args, s.cu_q, p.bsnd, batches, p.s1, p.t1, q0, q_av);
  starts(op, "cu_seqlens_ori_kv", args, s.cu_ori, p.bsnd, batches, p.bsnd ? args.dim(s.ori, 1) : 0, p.t2, o0, o_av);
  if (p.has_cmp) {
    starts(op, "cu_seqlens_cmp_kv", args, s.cu_cmp, p.bsnd, batches, p.bsnd ? args.dim(s.cmp, 1) : 0, p.t3, c0, c_av);
  } else {
    c0.assign(batches, 0);
    c_av.assign(batches, 0);
  }
  const std::vector<int64_t> q_len = used(op, "seqused_q", args, s.used_q, q_av);
  const std::vector<int64_t> o_len = used(op, "seqused_ori_kv", args, s.used_ori, o_av);
  const std::vector<int64_t> c_len = used(op, "seqused_cmp_kv", args, s.used_cmp, c_av);
  const bool residual = args.numel(s.residual) > 0;
  const std::vector<int64_t> res = residual ? values(args, s.residual) : std::vector<int64_t>();
  p.batches.resize(batches);
  p.row_batch.assign(p.t1, -1);
  for (int64_t b = 0; b < batches; ++b) {
    if (residual && (res[b] < 0 || res[b] >= p.ratio)) {
      throw error(op, "cmp_residual_kv[" + std::to_string(b) + "] = " + std::to_string(res[b]) +
                          " must be in [0, cmp_ratio = " + std::to_string(p.ratio) + ")");
    }
    Batch& bt = p.batches[b];
    bt = {q0[b], q_len[b], o0[b], o_len[b], c0[b], c_len[b], residual ? c_len[b] * p.ratio + res[b] : o_len[b]};
    for (int64_t t = bt.q0; t < bt.q0 + bt.q_len; ++t) p.row_batch[t] = static_cast<int32_t>(b);
  }
}

void Problem::ori_range(int64_t t, int64_t& lo, int64_t& hi) const {
  const Batch& b = batches[row_batch[t]];
  const int64_t thr = b.ori_len - b.q_len + (t - b.q0) + 1;  // the causal end (exclusive)
  lo = 0;
  hi = b.ori_len;
  if (ori_mode == table::OriMaskMode::kRightDownCausal) {
    hi = std::min(thr, b.ori_len);
  } else if (ori_mode == table::OriMaskMode::kBand) {
    if (win_left >= 0) lo = std::max<int64_t>(thr - 1 - win_left, 0);
    if (win_right >= 0) hi = std::min(thr + win_right, b.ori_len);
  }
}

int64_t Problem::cmp_limit(int64_t t) const {
  const Batch& b = batches[row_batch[t]];
  if (cmp_mode == table::CmpMaskMode::kNoMask) return b.cmp_len;
  const int64_t thr = b.mask_len - b.q_len + (t - b.q0) + 1;
  if (thr <= 0) return 0;
  return std::min(thr / ratio, b.cmp_len);
}

void row_keys(const Problem& p, const int32_t* ori_idx, const int32_t* cmp_idx, int64_t t, int64_t grp,
              RowKeys& keys) {
  keys.rows.clear();
  keys.slots.clear();
  const Batch& b = p.batches[p.row_batch[t]];
  int64_t lo = 0, hi = 0;
  p.ori_range(t, lo, hi);
  if (ori_idx == nullptr) {
    for (int64_t j = lo; j < hi; ++j) keys.rows.push_back(static_cast<int32_t>(b.ori0 + j));
    keys.slots.resize(keys.rows.size(), -1);
  } else {
    const int32_t* row = ori_idx + (t * p.n2 + grp) * p.k_ori;
    for (int64_t s = 0; s < p.k_ori; ++s) {
      if (row[s] >= lo && row[s] < hi) {
        keys.rows.push_back(static_cast<int32_t>(b.ori0 + row[s]));
        keys.slots.push_back(static_cast<int32_t>(s));
      }
    }
  }
  keys.n_ori = keys.size();
  if (!p.has_cmp) return;
  const int64_t limit = p.cmp_limit(t);
  if (cmp_idx == nullptr) {
    for (int64_t j = 0; j < limit; ++j) {
      keys.rows.push_back(static_cast<int32_t>(p.t2 + b.cmp0 + j));
      keys.slots.push_back(-1);
    }
  } else {
    const int32_t* row = cmp_idx + (t * p.n2 + grp) * p.k_cmp;
    for (int64_t s = 0; s < p.k_cmp; ++s) {
      if (row[s] >= 0 && row[s] < limit) {
        keys.rows.push_back(static_cast<int32_t>(p.t2 + b.cmp0 + row[s]));
        keys.slots.push_back(static_cast<int32_t>(s));
      }
    }
  }
}

std::vector<int64_t> validate(const char* op, const Problem& p, const int32_t* ori_idx, const int32_t* cmp_idx) {
  std::vector<int64_t> counts(static_cast<size_t>(p.t1 * p.n2), 0);
  const auto check = [&](const char* arg, const int32_t* idx, int64_t k, int64_t t, int64_t grp, int64_t n) {
    const int32_t* row = idx + (t * p.n2 + grp) * k;
    for (int64_t s = 0; s < k; ++s) {
      if (row[s] < -1 || row[s] >= n) {
        throw error(op, std::string(arg) + " value " + std::to_string(row[s]) + " at row " + std::to_string(t) +
                            ", group " + std::to_string(grp) + ", slot " + std::to_string(s) +
                            " is out of range [-1, " + std::to_string(n) + ") (batch " +
                            std::to_string(p.row_batch[t]) + ")");
      }
    }
  };
  RowKeys keys;
  for (int64_t t = 0; t < p.t1; ++t) {
    if (p.row_batch[t] < 0) continue;  // padding: never read
    const Batch& b = p.batches[p.row_batch[t]];
    for (int64_t grp = 0; grp < p.n2; ++grp) {
      if (ori_idx != nullptr) check("ori_sparse_indices", ori_idx, p.k_ori, t, grp, b.ori_len);
      if (cmp_idx != nullptr) check("cmp_sparse_indices", cmp_idx, p.k_cmp, t, grp, b.cmp_len);
      int64_t lo = 0, hi = 0;
      p.ori_range(t, lo, hi);
      int64_t n = 0;
      if (ori_idx == nullptr) {
        n = std::max<int64_t>(hi - lo, 0);
      } else {
        const int32_t* row = ori_idx + (t * p.n2 + grp) * p.k_ori;
        for (int64_t s = 0; s < p.k_ori; ++s) n += row[s] >= lo && row[s] < hi;
      }
      if (p.has_cmp) {
        const int64_t limit = p.cmp_limit(t);
        if (cmp_idx == nullptr) {
          n += limit;
        } else {
          const int32_t* row = cmp_idx + (t * p.n2 + grp) * p.k_cmp;
          for (int64_t s = 0; s < p.k_cmp; ++s) n += row[s] >= 0 && row[s] < limit;
        }
      }
      counts[t * p.n2 + grp] = n;
    }
  }
  return counts;
}

}  // namespace mgo::cpu::smla
