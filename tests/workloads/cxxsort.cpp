// SPDX-License-Identifier: MIT
// C++ without frame pointers: templates, exceptions and std::sort. Spins in
//   [std::sort internals | work::ByKey<…>::operator()] → work::sort_batch<…> →
//   work::Pipeline<…>::run → main
// filling and sorting batches of records; every 16th batch throws an exception through a few
// frames with destructors to run (landing pads) and catches it in Pipeline::run.
// Usage: cxxsort SECONDS
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "workload.h"

extern "C" {
volatile uint64_t sink;
}

#define NOINLINE __attribute__((noinline))

namespace work {

struct Record {
        uint64_t key;
        uint32_t payload[6];
};

template <typename T> struct ByKey {
        NOINLINE bool operator()(const T &a, const T &b) const { return a.key < b.key; }
};

struct Boom : std::runtime_error {
        explicit Boom(int depth) : std::runtime_error("boom at " + std::to_string(depth)) {}
};

struct Guard {
        explicit Guard(int d) : depth(d) {}
        ~Guard() { sink += (uint64_t) depth; }
        int depth;
};

NOINLINE uint64_t fail_deep(int depth) {
        Guard g(depth);
        auto owned = std::make_unique<uint64_t>(sink);
        if (depth == 0)
                throw Boom(depth);
        uint64_t r = fail_deep(depth - 1);
        return r + *owned;
}

template <typename T> NOINLINE void fill(std::vector<T> &v, uint64_t seed) {
        for (auto &r : v) {
                seed = seed * 6364136223846793005u + 1442695040888963407u;
                r.key = seed >> 11;
                r.payload[0] = (uint32_t) seed;
        }
}

template <typename T> NOINLINE uint64_t sort_batch(std::vector<T> &v) {
        std::sort(v.begin(), v.end(), ByKey<T>());
        return v.front().key ^ v.back().key;
}

template <typename T> class Pipeline {
public:
        explicit Pipeline(size_t n) : batch(n) {}

        NOINLINE uint64_t run(double until) {
                uint64_t acc = 0;
                for (unsigned i = 0; workload_now() < until; i++) {
                        fill(batch, acc + i);
                        acc += sort_batch(batch);
                        if (i % 16 == 15) {
                                try {
                                        acc += fail_deep(8);
                                } catch (const Boom &e) {
                                        acc += e.what()[0];
                                        caught++;
                                }
                        }
                }
                return acc + caught;
        }

private:
        std::vector<T> batch;
        uint64_t caught = 0;
};

} // namespace work

int main(int argc, char **argv) {
        double until = workload_deadline(argc, argv);
        work::Pipeline<work::Record> p(20000);
        sink += p.run(until);
        return 0;
}
