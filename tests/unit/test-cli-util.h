/* SPDX-License-Identifier: MIT */
#pragma once

/* Checks for the CLI's unit tests: report the failing expression and go on, main() returns
 * the failure count (meson: 0 pass, 77 skip). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;

#define CHECK(expr)                                                                   \
        do {                                                                          \
                if (!(expr)) {                                                        \
                        fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr); \
                        test_failures++;                                              \
                }                                                                     \
        } while (0)

#define CHECK_U64(a, b)                                                               \
        do {                                                                          \
                uint64_t _a_ = (uint64_t) (a), _b_ = (uint64_t) (b);                  \
                if (_a_ != _b_) {                                                     \
                        fprintf(stderr, "%s:%d: %s == %" PRIu64 ", expected %s == %" PRIu64 "\n", \
                                __FILE__, __LINE__, #a, _a_, #b, _b_);                \
                        test_failures++;                                              \
                }                                                                     \
        } while (0)

#define CHECK_INT(a, b)                                                               \
        do {                                                                          \
                long long _a_ = (long long) (a), _b_ = (long long) (b);               \
                if (_a_ != _b_) {                                                     \
                        fprintf(stderr, "%s:%d: %s == %lld, expected %lld\n", __FILE__, __LINE__, \
                                #a, _a_, _b_);                                        \
                        test_failures++;                                              \
                }                                                                     \
        } while (0)

#define CHECK_STR(a, b)                                                               \
        do {                                                                          \
                const char *_a_ = (a), *_b_ = (b);                                    \
                if (!_a_ || !_b_ || strcmp(_a_, _b_) != 0) {                          \
                        fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, __LINE__, \
                                #a, _a_ ?: "(null)", _b_ ?: "(null)");                \
                        test_failures++;                                              \
                }                                                                     \
        } while (0)

/* The end of main(): removes the test's scratch directory and returns the exit code. */
static inline int test_finish(const char *scratch_dir) {
        char cmd[700];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch_dir);
        (void) !system(cmd);
        if (test_failures)
                fprintf(stderr, "%d check(s) failed\n", test_failures);
        return test_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
