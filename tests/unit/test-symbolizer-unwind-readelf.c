/* SPDX-License-Identifier: MIT */
/* Cross-check against binutils: for every CFI row `readelf --debug-dump=frames-interp` prints
 * for this machine's libc (and the test program), the rule our table gives at that row's
 * address must agree with readelf's CFA, rbp and ra columns. readelf interprets the CFA
 * programs independently of libdw, so this checks the whole chain: FDE enumeration, libdw's
 * rows, our mapping, the address conversion and the table. Skipped without readelf. */

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include "test-symbolizer-unwind-util.h"

typedef struct Row {
        uint64_t loc;
        char cfa[32], rbp[32], ra[32];
} Row;

typedef struct Counts {
        unsigned rows, stop, sp, fp, deref, plt, signal, invalid, fp_at_cfa;
} Counts;

static bool starts(const char *s, const char *p) {
        return strncmp(s, p, strlen(p)) == 0;
}

static void check_row(const Row *row, const struct ep_unwind_rule *r, Counts *n) {
        char want[128] = "";
        bool ok;

        n->rows++;
        if (streq(row->ra, "u")) {
                ok = r->cfa_kind == EP_CFA_STOP;
                snprintf(want, sizeof want, "STOP");
                n->stop += ok;
        } else if (r->cfa_kind == EP_CFA_SIGNAL) {
                /* readelf cannot show the 'S' augmentation; glibc's sigreturn CFA is an expression. */
                ok = streq(row->cfa, "exp");
                snprintf(want, sizeof want, "SIGNAL only where the CFA is an expression");
                n->signal += ok;
        } else if (!streq(row->ra, "c-8")) {
                ok = r->cfa_kind == EP_CFA_INVALID;
                snprintf(want, sizeof want, "INVALID (ra %s)", row->ra);
                n->invalid += ok;
        } else if (starts(row->cfa, "rsp+") || starts(row->cfa, "rbp+")) {
                long off = strtol(row->cfa + 4, NULL, 10);
                uint8_t kind = row->cfa[1] == 's' ? EP_CFA_SP : EP_CFA_FP;
                ok = r->cfa_kind == kind && r->cfa_offset == off;
                snprintf(want, sizeof want, "%s %ld", kind == EP_CFA_SP ? "SP" : "FP", off);
                if (kind == EP_CFA_SP)
                        n->sp += ok;
                else
                        n->fp += ok;
        } else if (streq(row->cfa, "exp")) {
                ok = r->cfa_kind == EP_CFA_DEREF_FP || r->cfa_kind == EP_CFA_PLT || r->cfa_kind == EP_CFA_INVALID;
                snprintf(want, sizeof want, "DEREF_FP, PLT or INVALID");
                n->deref += ok && r->cfa_kind == EP_CFA_DEREF_FP;
                n->plt += ok && r->cfa_kind == EP_CFA_PLT;
                n->invalid += ok && r->cfa_kind == EP_CFA_INVALID;
        } else {
                ok = r->cfa_kind == EP_CFA_INVALID; /* another register */
                snprintf(want, sizeof want, "INVALID (CFA %s)", row->cfa);
                n->invalid += ok;
        }
        if (!ok)
                TEST_FAIL("row at 0x%" PRIx64 " (CFA %s, rbp %s, ra %s): got kind %u cfa %d, expected %s", row->loc,
                          row->cfa, row->rbp, row->ra, r->cfa_kind, r->cfa_offset, want);

        if (r->cfa_kind != EP_CFA_SP && r->cfa_kind != EP_CFA_FP && r->cfa_kind != EP_CFA_DEREF_FP)
                return;
        if (starts(row->rbp, "c-") || starts(row->rbp, "c+")) {
                long off = strtol(row->rbp + 1, NULL, 10);
                ok = r->fp_rule == EP_FP_AT_CFA && r->fp_offset == off;
                n->fp_at_cfa += ok;
        } else if (streq(row->rbp, "u") || streq(row->rbp, "s"))
                /* readelf prints "u" for "no rule yet" as well as "undefined" */
                ok = r->fp_rule == EP_FP_SAME || r->fp_rule == EP_FP_UNDEFINED;
        else if (streq(row->rbp, "exp"))
                ok = r->fp_rule == EP_FP_AT_FP || r->fp_rule == EP_FP_UNDEFINED;
        else
                ok = r->fp_rule == EP_FP_UNDEFINED;
        if (!ok)
                TEST_FAIL("row at 0x%" PRIx64 ": rbp %s, got fp rule %u offset %d", row->loc, row->rbp, r->fp_rule,
                          r->fp_offset);
        test_checks++;
}

static void cross_check(const char *readelf, const char *path, unsigned min_rows) {
        char cmd[8192], line[4096];
        size_t ncols = 0;
        int rbp_col = -1, ra_col = -1;
        bool in_fde = false;
        Counts n = {};
        UnwElf e = unw_elf_open(path);
        void *blob = unw_extract(path, NULL, NULL, NULL);
        FILE *p;

        snprintf(cmd, sizeof cmd, "LC_ALL=C '%s' --debug-dump=frames-interp '%s' 2>/dev/null", readelf, path);
        p = popen(cmd, "r");
        CHECK(p);

        while (fgets(line, sizeof line, p)) {
                char *tok[64], *save = NULL, *t;
                size_t k = 0;

                for (t = strtok_r(line, " \t\n", &save); t && k < ELEMENTSOF(tok); t = strtok_r(NULL, " \t\n", &save))
                        if (t[0] != '(') /* "r9 (r9)": a register rule names the register twice */
                                tok[k++] = t;
                if (k == 0)
                        continue;
                if (streq(tok[0], "LOC") && k >= 2 && streq(tok[1], "CFA")) {
                        ncols = k;
                        rbp_col = ra_col = -1;
                        for (size_t i = 0; i < k; i++) {
                                if (streq(tok[i], "rbp"))
                                        rbp_col = (int) i;
                                if (streq(tok[i], "ra"))
                                        ra_col = (int) i;
                        }
                        continue;
                }
                if (k >= 4 && (streq(tok[3], "FDE") || streq(tok[3], "CIE"))) {
                        /* A new entry: its table header follows. A CIE's rows are only the
                         * initial state, at no address. */
                        ncols = 0;
                        in_fde = streq(tok[3], "FDE");
                        continue;
                }
                if (!in_fde || ncols == 0 || k != ncols || strlen(tok[0]) < 8 || ra_col < 0)
                        continue;

                Row row = { .loc = strtoull(tok[0], NULL, 16) };
                snprintf(row.cfa, sizeof row.cfa, "%s", tok[1]);
                snprintf(row.rbp, sizeof row.rbp, "%s", rbp_col >= 0 ? tok[rbp_col] : "u");
                snprintf(row.ra, sizeof row.ra, "%s", tok[ra_col]);
                struct ep_unwind_rule rule = unw_rule_at(blob, unw_vaddr_to_offset(&e, row.loc));
                check_row(&row, &rule, &n);
        }
        /* readelf exits non-zero for unrelated complaints (libc.so.6's program interpreter);
         * the row count below says whether it printed what we need. */
        (void) pclose(p);

        printf("%s: %u rows agree with readelf (SP %u, FP %u, DEREF_FP %u, PLT %u, STOP %u, SIGNAL %u, "
               "INVALID %u; rbp saved at CFA %u)\n",
               path, n.rows, n.sp, n.fp, n.deref, n.plt, n.stop, n.signal, n.invalid, n.fp_at_cfa);
        CHECK(n.rows >= min_rows);
        CHECK(n.sp > 0);
        free(blob);
        unw_elf_close(&e);
}

int main(void) {
        const char *readelf = getenv("UNW_READELF");
        Dl_info info;

        if (!readelf || !*readelf || access(readelf, X_OK) < 0) {
                fprintf(stderr, "readelf not found, skipping the cross-check\n");
                return 77;
        }
        CHECK(dladdr((void *) gnu_get_libc_version, &info) && info.dli_fname);

        cross_check(readelf, info.dli_fname, 1000);
        cross_check(readelf, test_env("UNW_PROG_OMIT"), 10);
        cross_check(readelf, test_env("UNW_PROG_FP"), 10);
        TEST_DONE("symbolizer-unwind-readelf");
}
