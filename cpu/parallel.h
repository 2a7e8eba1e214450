// When an element-wise kernel is worth an OpenMP team.
#pragma once

#include <cstdint>

namespace mgo::cpu {

// Below this many elements a kernel runs on the calling thread: waking a team and meeting at its
// barrier costs more than the work, and on a busy machine (MindSpore's own runtime threads spin
// on the same cores) a worker that is not scheduled in time stalls the whole op for milliseconds.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;

inline bool worth_parallel(int64_t elements) { return elements >= kMinParallelElements; }

}  // namespace mgo::cpu
