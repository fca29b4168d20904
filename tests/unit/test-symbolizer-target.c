/* SPDX-License-Identifier: MIT */
/* A small program the symbolizer tests read: known functions laid out back to back (built with
 * -O0 -fno-inline -falign-functions=1), exported (-rdynamic) so a stripped copy still names
 * them through .dynsym, one static function only .symtab knows, a fixed GNU build ID (linker
 * flag in symbolizer/meson.build) and a Go build-ID note like the Go linker writes.
 *
 * Run as `test-symbolizer-target offsets`, it prints "NAME FILE_OFFSET" lines computed the way
 * the loader does it (address − mapping start + mapping offset, from /proc/self/maps) for its
 * functions and for two real return addresses: one inside sym_test_beta (after its call) and
 * one right after a call to a noreturn function at the very end of sym_test_caller. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* namesz 4, descsz 16, type 4 (Go build ID), name "Go\0\0", then the ID. */
__asm__(".pushsection .note.go.buildid, \"a\", @note\n"
        ".balign 4\n"
        ".long 4\n"
        ".long 16\n"
        ".long 4\n"
        ".ascii \"Go\\0\\0\"\n"
        ".ascii \"test-go-build-id\"\n"
        ".popsection\n");

int sym_test_alpha(int x);
int sym_test_beta(int x);
int sym_test_gamma(int x);
void sym_test_noreturn(int x) __attribute__((noreturn));
void sym_test_caller(int x);
void sym_test_after(void);

static int print_mode;
static void *ret_in_beta, *ret_after_noreturn;

static int print_offset(const char *name, const void *p) {
        uintptr_t a = (uintptr_t) p;
        char line[512];
        FILE *f = fopen("/proc/self/maps", "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof line, f)) {
                uintptr_t start, end;
                unsigned long long off;
                if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %llx", &start, &end, &off) == 3 && a >= start &&
                    a < end) {
                        printf("%s %llu\n", name, (unsigned long long) (a - start + off));
                        fclose(f);
                        return 0;
                }
        }
        fclose(f);
        return -1;
}

__attribute__((noinline)) int sym_test_alpha(int x) {
        int s = 0;
        if (print_mode && !ret_in_beta)
                ret_in_beta = __builtin_return_address(0);
        for (int i = 0; i < x; i++)
                s += i * 3 + (s >> 2);
        return s;
}

__attribute__((noinline)) int sym_test_beta(int x) {
        return sym_test_alpha(x + 1) * 7 + x;
}

__attribute__((noinline)) static int sym_test_local(int x) {
        return sym_test_beta(x) ^ 0x5a5a;
}

__attribute__((noinline)) int sym_test_gamma(int x) {
        return sym_test_local(x) + sym_test_beta(x - 1);
}

__attribute__((noinline)) void sym_test_noreturn(int x) {
        ret_after_noreturn = __builtin_return_address(0);
        if (print_mode) {
                print_offset("sym_test_alpha", (void *) sym_test_alpha);
                print_offset("sym_test_beta", (void *) sym_test_beta);
                print_offset("sym_test_local", (void *) sym_test_local);
                print_offset("sym_test_gamma", (void *) sym_test_gamma);
                print_offset("sym_test_caller", (void *) sym_test_caller);
                print_offset("sym_test_after", (void *) sym_test_after);
                print_offset("ret_in_beta", ret_in_beta);
                print_offset("ret_after_noreturn", ret_after_noreturn);
                fflush(stdout);
        }
        exit(x & 1);
}

/* Ends with the noreturn call: its return address is the first byte after this function. */
__attribute__((noinline)) void sym_test_caller(int x) {
        sym_test_noreturn(x + sym_test_gamma(x));
}

__attribute__((noinline)) void sym_test_after(void) {
        puts("after");
}

int main(int argc, char *argv[]) {
        print_mode = argc > 1 && strcmp(argv[1], "offsets") == 0;
        sym_test_caller(argc + 10);
}
