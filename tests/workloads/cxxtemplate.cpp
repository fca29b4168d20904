// SPDX-License-Identifier: MIT
// Demangling: spins in a member function of a class template, ns::Sorter<int>::run, called
// from main (built -O2 -g). Usage: cxxtemplate SECONDS
#include <cstdint>
#include <vector>

#include "workload.h"

extern "C" {
volatile uint64_t sink;
}

#define NOINLINE __attribute__((noinline))

namespace ns {

template <typename T> class Sorter {
public:
        explicit Sorter(size_t n) : v(n) {}

        // Insertion sort of pseudo-random values: plain loops, nothing to inline from libstdc++.
        NOINLINE uint64_t run(uint64_t seed) {
                for (auto &x : v) {
                        seed = seed * 6364136223846793005u + 1442695040888963407u;
                        x = (T) (seed >> 33);
                }
                for (size_t i = 1; i < v.size(); i++)
                        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
                                T t = v[j];
                                v[j] = v[j - 1];
                                v[j - 1] = t;
                        }
                return (uint64_t) v[0] + (uint64_t) v[v.size() - 1];
        }

private:
        std::vector<T> v;
};

} // namespace ns

int main(int argc, char **argv) {
        double until = workload_deadline(argc, argv);
        ns::Sorter<int> s(2000);
        uint64_t acc = 0;

        for (unsigned i = 0; workload_now() < until; i++)
                acc += s.run(acc + i);
        sink = acc;
        return 0;
}
