// See sparse_flash_attention_groups.h.
#include "sparse_flash_attention_groups.h"

#include <algorithm>
#include <cstring>

#include "parallel.h"

namespace mgo::cpu::sfa {
namespace {

// Exponent-all-ones test (Inf or NaN) on the raw bits of a float of any width.
template <typename Bits, Bits kExp>
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
bool exp_bits_finite(const Bits* x, int64_t n) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<int>((x[i] & kExp) == kExp);
  return bad == 0;
}

bool finite(const float* x, int64_t n) {
  static_assert(sizeof(float) == sizeof(uint32_t));
  return exp_bits_finite<uint32_t, 0x7f800000u>(reinterpret_cast<const uint32_t*>(x), n);
}
bool finite(const BFloat16* x, int64_t n) {
  return exp_bits_finite<uint16_t, 0x7f80>(reinterpret_cast<const uint16_t*>(x), n);
}
bool finite(const Half* x, int64_t n) {
  return exp_bits_finite<uint16_t, 0x7c00>(reinterpret_cast<const uint16_t*>(x), n);
}

int64_t floor_pow2(int64_t x) {
  int64_t r = 1;
  while (r * 2 <= x) r *= 2;
  return r;
}

}  // namespace

bool all_finite(const float* x, int64_t n) { return finite(x, n); }
bool all_finite(const uint16_t* bf16, int64_t n) { return finite(reinterpret_cast<const BFloat16*>(bf16), n); }

int64_t max_group_rows(int64_t g) {
  int64_t r = 1;
  while (r * 2 <= kMaxGroupRows && r * 2 * g <= kMaxGroupM) r *= 2;
  return r;
}

template <typename T>
std::vector<uint8_t> finite_key_rows(const Problem& p, const Inputs<T>& in) {
  const int64_t rows = p.t2 * p.n2;
  std::vector<uint8_t> ok(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (worth_parallel(rows * (p.dq + p.dv)))
  for (int64_t r = 0; r < rows; ++r) {
    bool f = finite(in.key + r * p.d, p.d) && finite(in.value + r * p.dv, p.dv);
    if (p.dr > 0) f = f && finite(in.key_rope + r * p.dr, p.dr);
    ok[r] = f ? 1 : 0;
  }
  return ok;
}

template std::vector<uint8_t> finite_key_rows(const Problem&, const Inputs<float>&);
template std::vector<uint8_t> finite_key_rows(const Problem&, const Inputs<Half>&);
template std::vector<uint8_t> finite_key_rows(const Problem&, const Inputs<BFloat16>&);

std::vector<RowGroup> group_rows(const Problem& p, const int32_t* indices, const std::vector<int64_t>& counts,
                                 const std::vector<uint8_t>& key_ok, int64_t r0, int64_t r1, int64_t max_rows) {
  std::vector<RowGroup> out;
  // stamp[key] == attempt: the key is already in the union of the group being grown.
  std::vector<int64_t> stamp(static_cast<size_t>(p.t2), -1);
  std::vector<int32_t> keys;
  int64_t attempt = 0;
  for (int64_t grp = 0; grp < p.n2; ++grp) {
    // Adds row t's keys to the union of this attempt: false when the row selects a non-finite key row.
    int64_t uni = 0;
    const auto add = [&](int64_t t) {
      visible_keys(p, indices, t, grp, keys);
      for (const int32_t j : keys) {
        if (key_ok[j * p.n2 + grp] == 0) return false;
        if (stamp[j] != attempt) {
          stamp[j] = attempt;
          ++uni;
        }
      }
      return true;
    };
    for (int64_t t = r0; t < r1;) {
      int64_t rows = 1;
      if (max_rows > 1 && counts[t * p.n2 + grp] > 0) {
        ++attempt;
        uni = 0;
        int64_t own = counts[t * p.n2 + grp];
        if (add(t)) {
          const int32_t b = p.row_batch[t];
          for (int64_t n = t + 1; rows < max_rows && n < r1 && p.row_batch[n] == b; ++n) {
            const int64_t c = counts[n * p.n2 + grp];
            if (c == 0 || !add(n) || (rows + 1) * uni * 4 > (own + c) * 5) break;
            own += c;
            ++rows;
          }
          rows = floor_pow2(rows);
        }
      }
      out.push_back({t, rows, grp});
      t += rows;
    }
  }
  return out;
}

void key_union(const Problem& p, const int32_t* indices, const RowGroup& rg, std::vector<int32_t>& scratch,
               KeyUnion& u) {
  scratch.clear();
  std::vector<size_t> ends(static_cast<size_t>(rg.rows));
  for (int64_t r = 0; r < rg.rows; ++r) {
    append_visible_keys(p, indices, rg.t0 + r, rg.grp, scratch);
    ends[r] = scratch.size();
  }
  u.keys.assign(scratch.begin(), scratch.end());
  std::sort(u.keys.begin(), u.keys.end());
  u.keys.erase(std::unique(u.keys.begin(), u.keys.end()), u.keys.end());
  const int64_t nu = static_cast<int64_t>(u.keys.size());
  u.weighted = rg.rows > 1 || static_cast<int64_t>(scratch.size()) != nu;
  if (!u.weighted) return;
  u.weight.assign(static_cast<size_t>(rg.rows * nu), 0.0f);
  size_t i = 0;
  for (int64_t r = 0; r < rg.rows; ++r) {
    float* w = u.weight.data() + r * nu;
    for (; i < ends[r]; ++i) {
      w[std::lower_bound(u.keys.begin(), u.keys.end(), scratch[i]) - u.keys.begin()] += 1.0f;
    }
  }
  u.weighted = std::any_of(u.weight.begin(), u.weight.end(), [](float x) { return x != 1.0f; });
}

}  // namespace mgo::cpu::sfa
