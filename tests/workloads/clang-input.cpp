// SPDX-License-Identifier: MIT
// Input for the clang++ workload of the native-unwinding tests (not built by meson): a
// template-heavy translation unit that keeps `clang++ -O2 -c` busy for a few seconds, almost
// all of it inside libclang-cpp and libLLVM, which are built without frame pointers.
#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

namespace heavy {

template <int N> struct Node {
        std::array<long, (N % 7) + 1> values{};
        std::map<int, std::string> names;
        long sum() const { return std::accumulate(values.begin(), values.end(), long{N}); }
};

template <int N> struct Chain {
        Node<N> node;
        Chain<N - 1> rest;
        long total() const { return node.sum() + rest.total(); }
        template <typename F> void visit(F &&f) {
                f(node);
                rest.visit(f);
        }
};
template <> struct Chain<0> {
        long total() const { return 0; }
        template <typename F> void visit(F &&) {}
};

using Value = std::variant<int, long, double, std::string, std::vector<int>, std::map<int, int>>;

template <typename T> std::vector<T> sorted_unique(std::vector<T> v) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        return v;
}

template <int N> long instantiate_many() {
        Chain<N> c;
        long acc = 0;
        c.visit([&](auto &node) {
                node.names[N] = std::to_string(N);
                acc += node.sum() + (long) node.names.size();
        });
        std::vector<Value> vals;
        vals.emplace_back(N);
        vals.emplace_back(std::string(N, 'x'));
        vals.emplace_back(std::vector<int>(N, N));
        for (auto &v : vals)
                acc += std::visit([](auto &&x) -> long {
                        using X = std::decay_t<decltype(x)>;
                        if constexpr (std::is_arithmetic_v<X>)
                                return (long) x;
                        else
                                return (long) x.size();
                }, v);
        std::unordered_map<std::string, std::function<long(long)>> fns;
        fns["sq"] = [](long x) { return x * x; };
        fns["inc"] = [](long x) { return x + N; };
        for (auto &[k, f] : fns)
                acc += f(acc) + (long) k.size();
        auto u = sorted_unique(std::vector<long>{acc, N, acc % 7, N * 3L});
        std::set<std::tuple<int, long, std::string>> s;
        s.emplace(N, acc, std::to_string(acc));
        return acc + (long) u.size() + (long) s.size() + c.total();
}

template <int... Is> long run_all(std::integer_sequence<int, Is...>) {
        return (instantiate_many<Is + 1>() + ...);
}

long match_all(const std::string &text) {
        std::regex words(R"((\w+)@(\w+)\.(com|org|net))");
        long n = 0;
        for (auto it = std::sregex_iterator(text.begin(), text.end(), words); it != std::sregex_iterator(); ++it)
                n += (long) it->size();
        return n;
}

} // namespace heavy

long heavy_entry(const std::string &text) {
        return heavy::run_all(std::make_integer_sequence<int, 20>()) + heavy::match_all(text);
}
