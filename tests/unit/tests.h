/* SPDX-License-Identifier: MIT */
#pragma once

/* Minimal assertion helpers for the C unit tests: a failed check prints where and why and
 * exits non-zero; meson counts each test binary as one test. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

static unsigned tests_checks;

#define ASSERT_TRUE(expr)                                                                   \
        do {                                                                                \
                tests_checks++;                                                             \
                if (!(expr)) {                                                              \
                        fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #expr); \
                        exit(EXIT_FAILURE);                                                 \
                }                                                                           \
        } while (0)

#define ASSERT_EQ(a, b)                                                                     \
        do {                                                                                \
                tests_checks++;                                                             \
                long long _a = (long long) (a), _b = (long long) (b);                       \
                if (_a != _b) {                                                             \
                        fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, \
                                __LINE__, #a, #b, _a, _b);                                  \
                        exit(EXIT_FAILURE);                                                 \
                }                                                                           \
        } while (0)

#define ASSERT_OK(expr)                                                                     \
        do {                                                                                \
                tests_checks++;                                                             \
                long long _r = (long long) (expr);                                          \
                if (_r < 0) {                                                               \
                        fprintf(stderr, "%s:%d: %s failed: %lld (%s)\n", __FILE__, __LINE__,  \
                                #expr, _r, strerror((int) -_r));                            \
                        exit(EXIT_FAILURE);                                                 \
                }                                                                           \
        } while (0)

#define ASSERT_STREQ(a, b)                                                                  \
        do {                                                                                \
                tests_checks++;                                                             \
                const char *_a = (a), *_b = (b);                                            \
                if (!_a || !_b || strcmp(_a, _b) != 0) {                                    \
                        fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, \
                                __LINE__, #a, #b, _a ?: "(null)", _b ?: "(null)");          \
                        exit(EXIT_FAILURE);                                                 \
                }                                                                           \
        } while (0)

static inline int tests_summary(const char *name) {
        printf("%s: %u checks passed\n", name, tests_checks);
        return EXIT_SUCCESS;
}
