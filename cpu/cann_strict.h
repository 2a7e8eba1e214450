// The opt-in check of sparse_indices against CANN's rules (docs/contract.md section 0.12), for code
// that will run on Ascend: with MGO_CANN_STRICT=1 in the environment, every kernel that reads
// sparse_indices (sparse_flash_attention(_grad), lightning_indexer_grad,
// sparse_lightning_indexer_grad_kl_loss) raises where CANN's kernels would read the indices
// differently from this package. Without it nothing is checked beyond the contract's own rules.
#pragma once

#include <cstdint>
#include <vector>

namespace mgo::cpu {

// True when MGO_CANN_STRICT=1 (read at every launch, so a process may switch it).
bool cann_strict();

// Checks one index row (K slots) of query row t, key group grp: CANN reads only its first
// `slots` = min(K, ceil(visible / sparse_block_size)) slots and stops at the first -1, so it must
// hold its valid entries first (no entry >= 0 after a -1), no entry twice, and at most `slots`
// entries >= 0. Throws std::runtime_error naming `op`, the row, the slot and the rule broken.
// `seen`: scratch reused between rows.
void check_cann_row(const char* op, const int32_t* row, int64_t k, int64_t slots, int64_t t, int64_t grp,
                    std::vector<int32_t>& seen);

}  // namespace mgo::cpu
