/* SPDX-License-Identifier: MIT */
/* The flame graph writers on call trees built in memory: the HTML page's embedded JSON (valid,
 * complete, with exact counts), escaping of hostile function names, the icicle layout, and the
 * differential graph's matching, colours and removed functions, in HTML and SVG. */

#include <stdlib.h>

#include "calltree.h"
#include "flamegraph-html.h"
#include "flamegraph-svg.h"

#include "test-cli-util.h"

#define HOSTILE "</script><script>alert(1)</script> \"q\" 'x' \xe2\x80\xa8 <!--"
#define HOSTILE_JSON \
        "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e \\\"q\\\" 'x' \\u2028 \\u003c!--"

typedef struct Sample {
        const char *leaf_first[4];
        EpViewKind kind;
        uint64_t count;
} Sample;

/* root → "app (1)" → the frames of each sample, module "app". */
static EpCallTree *make_tree(const Sample *samples, size_t n) {
        EpCallTree *t = NULL;
        uint32_t proc_name, module, proc;

        CHECK_INT(ep_calltree_new(&t), 0);
        CHECK_INT(ep_calltree_intern(t, "app (1)", &proc_name), 0);
        CHECK_INT(ep_calltree_intern(t, "app", &module), 0);
        EpViewFrame pf = { .name = proc_name, .module = 0, .kind = EP_VIEW_PROCESS };
        CHECK_INT(ep_calltree_child(t, 0, &pf, &proc), 0);

        for (size_t i = 0; i < n; i++) {
                EpViewFrame frames[4];
                size_t k = 0;
                for (; k < 4 && samples[i].leaf_first[k]; k++) {
                        CHECK_INT(ep_calltree_intern(t, samples[i].leaf_first[k], &frames[k].name), 0);
                        frames[k].module = module;
                        /* The leaf has the sample's kind; its callers are native. */
                        frames[k].kind = k == 0 ? samples[i].kind : EP_VIEW_NATIVE;
                }
                CHECK_INT(ep_calltree_add(t, proc, frames, k, samples[i].count), 0);
        }
        return t;
}

static char *write_to_string(int (*writer)(FILE *, const EpCallTree *, const EpFlameOptions *),
                             const EpCallTree *t, const EpFlameOptions *o, int *ret) {
        char *s = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&s, &size);
        *ret = writer(f, t, o);
        fclose(f);
        return s;
}

static size_t count(const char *s, const char *needle) {
        size_t n = 0;
        for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

/* A strict JSON validator (RFC 8259 grammar): what JSON.parse in the page would accept. */
static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
                p++;
        return p;
}

static const char *json_string(const char *p) {
        if (*p++ != '"')
                return NULL;
        for (; *p != '"'; p++) {
                if ((unsigned char) *p < 0x20)
                        return NULL;
                if (*p != '\\')
                        continue;
                p++;
                if (*p == 'u') {
                        for (int i = 1; i <= 4; i++)
                                if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                                        return NULL;
                        p += 4;
                } else if (!*p || !strchr("\"\\/bfnrt", *p))
                        return NULL;
        }
        return p + 1;
}

static const char *json_list(const char *p, char close, bool object, int depth) {
        p = json_ws(p + 1);
        if (*p == close)
                return p + 1;
        for (;;) {
                if (object) {
                        p = json_string(json_ws(p));
                        if (!p || *(p = json_ws(p)) != ':')
                                return NULL;
                        p++;
                }
                p = json_value(p, depth + 1);
                if (!p)
                        return NULL;
                p = json_ws(p);
                if (*p == close)
                        return p + 1;
                if (*p != ',')
                        return NULL;
                p++;
        }
}

static const char *json_value(const char *p, int depth) {
        if (depth > 64)
                return NULL;
        p = json_ws(p);
        if (*p == '{')
                return json_list(p, '}', true, depth);
        if (*p == '[')
                return json_list(p, ']', false, depth);
        if (*p == '"')
                return json_string(p);
        if (startswith(p, "true") || startswith(p, "null"))
                return p + 4;
        if (startswith(p, "false"))
                return p + 5;
        const char *q = p + (*p == '-');
        if (*q < '0' || *q > '9')
                return NULL;
        while ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-')
                q++;
        return q;
}

/* The embedded JSON of a page, copied out. */
static char *page_json(const char *html) {
        static const char open[] = "<script id=\"ep-data\" type=\"application/json\">";
        const char *a = strstr(html, open);
        if (!a)
                return NULL;
        a += strlen(open);
        const char *b = strstr(a, "</script>");
        return b ? strndup(a, (size_t) (b - a)) : NULL;
}

static const Sample base_samples[] = {
        { { "hot", "main" }, EP_VIEW_NATIVE, 60 },
        { { "cold", "main" }, EP_VIEW_NATIVE, 20 },
        { { "do_syscall_64 [k]", "write", "main" }, EP_VIEW_KERNEL, 15 },
        { { HOSTILE, "main" }, EP_VIEW_UNKNOWN, 5 },
        { { "main" }, EP_VIEW_NATIVE, 3 }, /* self samples of main */
};

static void test_html(void) {
        EpCallTree *t = make_tree(base_samples, ELEMENTSOF(base_samples));
        EpFlameOptions o = { .title = "T <b>&</b>", .subtitle = "103 samples, pid 1" };
        int embedded;
        char *html = write_to_string(ep_flamegraph_write_html, t, &o, &embedded);

        /* root, process, main, hot, cold, write, do_syscall_64, hostile */
        CHECK_INT(embedded, 8);
        CHECK_INT(embedded, (int) ep_calltree_size(t));
        CHECK(startswith(html, "<!DOCTYPE html>"));
        CHECK(strstr(html, "</html>\n") != NULL);
        CHECK(strstr(html, EP_FLAME_DATA_PLACEHOLDER) == NULL);
        /* Offline: nothing refers to another resource. */
        CHECK(strstr(html, "http://") == NULL && strstr(html, "https://") == NULL && strstr(html, " src=") == NULL);
        /* The hostile name cannot close a script element: only the template's two close tags. */
        CHECK_INT(count(html, "</script>"), 2);
        CHECK_INT(count(html, "<script"), 2);
        CHECK(strstr(html, "\xe2\x80\xa8") == NULL);

        char *json = page_json(html);
        CHECK(json != NULL);
        if (json) {
                const char *end = json_value(json, 0);
                CHECK(end != NULL && *json_ws(end) == 0);
                CHECK(strchr(json, '<') == NULL && strchr(json, '>') == NULL && strchr(json, '&') == NULL);
                CHECK(strstr(json, "\"title\":\"T \\u003cb\\u003e\\u0026\\u003c/b\\u003e\"") != NULL);
                CHECK(strstr(json, "\"subtitle\":\"103 samples, pid 1\"") != NULL);
                CHECK(strstr(json, "\"icicle\":false") != NULL);
                CHECK(strstr(json, "\"total\":103") != NULL);
                CHECK(strstr(json, "\"diff\":null") != NULL);
                CHECK(strstr(json, "\"stride\":4") != NULL);
                /* Every function, by its interned id, and its node with exact figures. The
                 * strings are "", "all", "app (1)", "app", then in order of first use; the
                 * frames in node-id order; the nodes in pre-order, children by name (byte
                 * order: "<" sorts before letters). */
                CHECK(strstr(json, "\"strings\":[\"\",\n\"all\",\n\"app (1)\",\n\"app\",\n\"hot\",\n\"main\",\n"
                                   "\"cold\",\n\"do_syscall_64 [k]\",\n\"write\",\n\"" HOSTILE_JSON "\"]") != NULL);
                CHECK(strstr(json, "\"frames\":[[1,0,0,") != NULL);
                /* frame indices: all 0, app (1) 1, main 2, hot 3, cold 4, write 5, do_syscall 6,
                 * hostile 7; kinds: do_syscall_64 kernel (3), hostile unknown (4). */
                CHECK(strstr(json, ",[7,3,3,") != NULL);
                CHECK(strstr(json, ",[9,3,4,") != NULL);
                CHECK(strstr(json, "\"nodes\":[\n0,0,103,0,\n1,1,103,0,\n2,2,103,3,\n7,3,5,5,\n4,3,20,20,\n"
                                   "3,3,60,60,\n5,3,15,0,\n6,4,15,15]") != NULL);
                free(json);
        }
        free(html);

        /* Icicle: the page is told; the SVG puts the root on the first row (y 70, under the
         * header) instead of the last. */
        o.icicle = true;
        html = write_to_string(ep_flamegraph_write_html, t, &o, &embedded);
        CHECK(strstr(html, "\"icicle\":true") != NULL);
        free(html);
        int drawn;
        char *svg = write_to_string(ep_flamegraph_write_svg, t, &o, &drawn);
        CHECK_INT(drawn, 8);
        CHECK(strstr(svg, "(103 samples, 100.00%)</title><rect x=\"10.00\" y=\"70\" ") != NULL);
        /* do_syscall_64, right of "<...", cold and hot (85 of 103 samples), is on the
         * deepest row, 4: 70 + 4 * 16 */
        CHECK(strstr(svg, "(15 samples, 14.56%)</title><rect x=\"983.79\" y=\"134\" ") != NULL);
        free(svg);
        o.icicle = false;
        svg = write_to_string(ep_flamegraph_write_svg, t, &o, &drawn);
        /* height 70 + 5 rows * 16 + 12 = 162; the root's row is the last: 162 - 12 - 16 */
        CHECK(strstr(svg, "(103 samples, 100.00%)</title><rect x=\"10.00\" y=\"134\" ") != NULL);
        CHECK(strstr(svg, "(15 samples, 14.56%)</title><rect x=\"983.79\" y=\"70\" ") != NULL);
        free(svg);

        ep_calltree_free(t);
}

static void test_json_string(void) {
        char *s = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&s, &size);
        ep_json_write_string(f, "a\"b\\c\n\t\x01\x7f<>&\xe2\x80\xa8\xe2\x80\xa9 \xc3\xa9 \xff\xc3 /");
        fclose(f);
        CHECK_STR(s, "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f\\u003c\\u003e\\u0026\\u2028\\u2029 \xc3\xa9 "
                     "\\ufffd\\ufffd /\"");
        CHECK(json_value(s, 0) == s + strlen(s));
        free(s);
}

/* Target (100 samples): hot 60, cold 20, new 20. Baseline (200 samples, a longer window):
 * hot 40, cold 120, gone 40. Shares: hot 20% → 60% (grew), cold 60% → 20% (shrank), new
 * 0 → 20%, gone 20% → only in the baseline. */
static void test_diff(void) {
        static const Sample target_samples[] = {
                { { "hot", "main" }, EP_VIEW_NATIVE, 60 },
                { { "cold", "main" }, EP_VIEW_NATIVE, 20 },
                { { "new", "main" }, EP_VIEW_NATIVE, 20 },
        };
        static const Sample baseline_samples[] = {
                { { "gone", "main" }, EP_VIEW_NATIVE, 40 },
                { { "cold", "main" }, EP_VIEW_NATIVE, 120 },
                { { "hot", "main" }, EP_VIEW_NATIVE, 40 },
        };
        EpCallTree *target = make_tree(target_samples, ELEMENTSOF(target_samples));
        EpCallTree *baseline = make_tree(baseline_samples, ELEMENTSOF(baseline_samples));
        EpFlameDiff *d = NULL;

        CHECK_INT(ep_flame_diff_new(target, baseline, &d), 0);
        if (!d)
                return;
        CHECK_U64(d->target_total, 100);
        CHECK_U64(d->baseline_total, 200);
        /* Node ids of the target: 0 root, 1 process, 2 main, 3 hot, 4 cold, 5 new. */
        CHECK_STR(ep_calltree_string(target, ep_calltree_node(target, 3)->frame.name), "hot");
        CHECK_U64(d->base_total[0], 200);
        CHECK_U64(d->base_total[2], 200);
        CHECK_U64(d->base_total[3], 40);
        CHECK_U64(d->base_self[3], 40);
        CHECK_U64(d->base_total[4], 120);
        CHECK_U64(d->base_total[5], 0);
        CHECK_INT(d->n_removed, 1);
        if (d->n_removed == 1) {
                CHECK_STR(d->removed_name[0], "gone");
                CHECK_STR(d->removed_module[0], "app");
                CHECK_U64(d->removed[0].total, 40);
        }
        CHECK(d->scale > 0.399 && d->scale < 0.401);

        EpFlameOptions o = { .title = "diff", .diff = d };
        EpRgb hot = ep_flame_node_color(target, &o, 3), cold = ep_flame_node_color(target, &o, 4);
        EpRgb fresh = ep_flame_node_color(target, &o, 5), same = ep_flame_node_color(target, &o, 2);
        /* The biggest changes get the full red and blue; +20 points half the red; main's
         * share did not change: neutral. */
        CHECK(hot.r == 222 && hot.g == 45 && hot.b == 38);
        CHECK(cold.r == 49 && cold.g == 100 && cold.b == 215);
        CHECK(fresh.r == 229 && fresh.g == 141 && fresh.b == 135);
        CHECK(same.r == 236 && same.g == 236 && same.b == 232);

        int n;
        char *html = write_to_string(ep_flamegraph_write_html, target, &o, &n);
        char *json = page_json(html);
        CHECK(json != NULL);
        if (json) {
                const char *end = json_value(json, 0);
                CHECK(end != NULL && *json_ws(end) == 0);
                CHECK(strstr(json, "\"stride\":7") != NULL);
                CHECK(strstr(json, "\"diff\":{\"targetTotal\":100,\"baselineTotal\":200,"
                                   "\"removed\":[[\"gone\",\"app\",40,40]]}") != NULL);
                /* frame, depth, total, self, baseline total, baseline self, colour */
                CHECK(strstr(json, "\n3,3,60,60,40,40,14560550,") != NULL);  /* 0xde2d26 */
                CHECK(strstr(json, "\n4,3,20,20,120,120,3237079,") != NULL); /* 0x3164d7 */
                CHECK(strstr(json, "\n5,3,20,20,0,0,15043975]") != NULL);    /* 0xe58d87 */
                CHECK(strstr(json, "\"legend\":[[\"grew\",14560550],[\"shrank\",3237079],"
                                   "[\"unchanged\",15527144]]") != NULL);
                free(json);
        }
        free(html);

        char *svg = write_to_string(ep_flamegraph_write_svg, target, &o, &n);
        CHECK_INT(n, 6);
        CHECK(strstr(svg, "<title>hot in app (60 samples, 60.00%; baseline 40, 20.00%; +40.00 points)</title>"
                          "<rect x=\"246.00\" y=\"") != NULL);
        CHECK(strstr(svg, "<title>cold in app (20 samples, 20.00%; baseline 120, 60.00%; -40.00 points)</title>") != NULL);
        CHECK(strstr(svg, "fill=\"rgb(222,45,38)\"") != NULL);
        CHECK(strstr(svg, "fill=\"rgb(49,100,215)\"") != NULL);
        CHECK(strstr(svg, "Only in the baseline (1 function): gone (40, 20.00%)</text>") != NULL);
        free(svg);

        ep_flame_diff_free(d);
        ep_calltree_free(target);
        ep_calltree_free(baseline);
}

int main(void) {
        test_json_string();
        test_html();
        test_diff();
        if (test_failures)
                fprintf(stderr, "%d check(s) failed\n", test_failures);
        return test_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
