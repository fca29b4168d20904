/* SPDX-License-Identifier: MIT */
#pragma once

/* Minimal assertion helpers for the C unit tests: a failed check prints where and why and
 * exits non-zero; meson counts each test binary as one test. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"

/* The exit code meson counts as a skipped test: for what this machine cannot run, never a pass. */
#define EXIT_TEST_SKIP 77

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

static inline uint64_t tests_monotonic_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Waits for a condition, never for a fixed time: evaluates cond every 10 ms until it holds. If
 * it still does not after timeout_s seconds (generous: this is how long a loaded machine may
 * take, not how long it should), fails naming the condition and what the format, evaluated
 * after the last try, shows of the state it last saw. cond may have side effects (pump a bus,
 * read a count into a variable the format prints). */
#define ASSERT_EVENTUALLY(cond, timeout_s, fmt, ...)                                        \
        do {                                                                                \
                tests_checks++;                                                             \
                uint64_t _deadline = tests_monotonic_ms() + (uint64_t) (timeout_s) * 1000;  \
                while (!(cond)) {                                                           \
                        if (tests_monotonic_ms() >= _deadline) {                            \
                                fprintf(stderr, "%s:%d: waited %us for %s; last saw: " fmt "\n", \
                                        __FILE__, __LINE__, (unsigned) (timeout_s), #cond, ##__VA_ARGS__); \
                                exit(EXIT_FAILURE);                                         \
                        }                                                                   \
                        usleep(10 * 1000);                                                  \
                }                                                                           \
        } while (0)

/* A clock that moves only when the test moves it, for ep_clock_set(tests_clock): rate limits,
 * ages and re-read intervals then see exactly the time the test sets, however slow the machine,
 * so a test can say "not yet" and "now" without racing real time. Every clock reads the same. */
static uint64_t tests_clock_ns = 1000 * NSEC_PER_SEC;

static inline uint64_t tests_clock(int clock) {
        return tests_clock_ns;
}

static inline void tests_clock_advance(uint64_t ns) {
        tests_clock_ns += ns;
}

static inline int tests_summary(const char *name) {
        printf("%s: %u checks passed\n", name, tests_checks);
        return EXIT_SUCCESS;
}
