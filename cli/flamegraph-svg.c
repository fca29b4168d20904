/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "flamegraph-svg.h"
#include "hashmap.h"

#define DEFAULT_WIDTH 1200
#define PAD_X 10.0
#define ROW_HEIGHT 16          /* one stack level */
#define FRAME_HEIGHT 15        /* the rectangle; the rest is the gap between levels */
#define TOP_MARGIN 70          /* title, subtitle, legend */
#define BOTTOM_MARGIN 12
#define FONT_SIZE 11
#define CHAR_WIDTH (0.6 * FONT_SIZE) /* monospace advance */
#define MIN_WIDTH 0.1          /* narrower frames are not drawn */

static size_t utf8_chars(const char *s) {
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *) s; *p; n++) {
                size_t l = ep_utf8_len(p);
                p += l ? l : 1;
        }
        return n;
}

void ep_svg_write_text(FILE *f, const char *s, int max_chars) {
        const unsigned char *p = (const unsigned char *) s;
        bool cut = max_chars >= 0 && utf8_chars(s) > (size_t) max_chars;
        int budget = cut ? MAX(max_chars - 3, 0) : -1;

        for (int written = 0; *p && (budget < 0 || written < budget); written++) {
                size_t l = ep_utf8_len(p);
                if (l == 0 || (l == 1 && (*p < 0x20 || *p == 0x7f))) {
                        fputc('?', f);
                        p++;
                        continue;
                }
                switch (*p) {
                case '<':
                        fputs("&lt;", f);
                        break;
                case '>':
                        fputs("&gt;", f);
                        break;
                case '&':
                        fputs("&amp;", f);
                        break;
                case '"':
                        fputs("&quot;", f);
                        break;
                case '\'':
                        fputs("&apos;", f);
                        break;
                default:
                        fwrite(p, 1, l, f);
                }
                p += l;
        }
        if (cut)
                fputs(max_chars >= 3 ? "..." : "", f);
}


typedef struct Layout {
        FILE *f;
        const EpCallTree *tree;
        const EpFlameOptions *o;
        double total;       /* samples of the root */
        double scale;       /* pixels per sample */
        unsigned graph_top; /* y of the first row */
        unsigned rows;      /* stack levels */
        int drawn;
} Layout;

static double percent(uint64_t part, uint64_t whole) {
        return 100.0 * (double) part / (double) MAX(whole, (uint64_t) 1);
}

static void write_tooltip(Layout *l, uint32_t id) {
        const EpCallNode *node = ep_calltree_node(l->tree, id);
        const char *module = ep_calltree_string(l->tree, node->frame.module);
        const EpFlameDiff *d = l->o->diff;

        fputs("<title>", l->f);
        ep_svg_write_text(l->f, ep_calltree_string(l->tree, node->frame.name), -1);
        if (*module) {
                fputs(" in ", l->f);
                ep_svg_write_text(l->f, module, -1);
        }
        if (d)
                fprintf(l->f, " (%" PRIu64 " sample%s, %.2f%%; baseline %" PRIu64 ", %.2f%%; %+.2f points)</title>",
                        node->total, node->total == 1 ? "" : "s", percent(node->total, d->target_total),
                        d->base_total[id], percent(d->base_total[id], d->baseline_total),
                        100.0 * ep_flame_diff_delta(d, l->tree, id));
        else
                fprintf(l->f, " (%" PRIu64 " sample%s, %.2f%%)</title>", node->total, node->total == 1 ? "" : "s",
                        100.0 * (double) node->total / l->total);
}

static int draw(void *userdata, uint32_t id, uint64_t offset) {
        Layout *l = userdata;
        const EpCallNode *node = ep_calltree_node(l->tree, id);
        double w = (double) node->total * l->scale;
        if (w < MIN_WIDTH)
                return 0; /* and so are all its callees */

        double x = PAD_X + (double) offset * l->scale;
        unsigned row = l->o->icicle ? node->depth : l->rows - 1 - node->depth;
        unsigned y = l->graph_top + row * ROW_HEIGHT;
        EpRgb c = ep_flame_node_color(l->tree, l->o, id);

        fputs("<g>", l->f);
        write_tooltip(l, id);
        fprintf(l->f, "<rect x=\"%.2f\" y=\"%u\" width=\"%.2f\" height=\"%u\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>",
                x, y, w, FRAME_HEIGHT, c.r, c.g, c.b);
        int chars = (int) ((w - 6) / CHAR_WIDTH);
        if (chars >= 3) {
                fprintf(l->f, "<text x=\"%.2f\" y=\"%u\">", x + 3, y + FRAME_HEIGHT - 4);
                ep_svg_write_text(l->f, ep_calltree_string(l->tree, node->frame.name), chars);
                fputs("</text>", l->f);
        }
        fputs("</g>\n", l->f);
        l->drawn++;
        return 1;
}

/* A diff's paths only in the baseline have no width in the target: name what vanished below
 * the graph, as much as fits on one line. */
static void write_removed(Layout *l, double width, unsigned y) {
        const EpFlameDiff *d = l->o->diff;
        int left = (int) ((width - 2 * PAD_X) / CHAR_WIDTH);

        fprintf(l->f, "<text class=\"subtitle\" x=\"%.1f\" y=\"%u\">", PAD_X, y);
        if (d->n_removed == 0)
                fputs("Every function of the baseline also ran in the target window.", l->f);
        else
                left -= fprintf(l->f, "Only in the baseline (%zu function%s):", d->n_removed,
                                d->n_removed == 1 ? "" : "s");
        for (size_t i = 0; i < d->n_removed; i++) {
                _cleanup_free_ char *item = NULL;
                if (asprintf(&item, "%s %s (%" PRIu64 ", %.2f%%)", i == 0 ? "" : ",", d->removed_name[i],
                             d->removed[i].total, percent(d->removed[i].total, d->baseline_total)) < 0)
                        break;
                int len = (int) utf8_chars(item);
                /* Keep room to say how many did not fit; the first one always shows, cut. */
                if (i > 0 && len > left - 12) {
                        fprintf(l->f, ", %zu more", d->n_removed - i);
                        break;
                }
                ep_svg_write_text(l->f, item, MAX(left, 3));
                left -= len;
        }
        fputs("</text>\n", l->f);
}

int ep_flamegraph_write_svg(FILE *f, const EpCallTree *tree, const EpFlameOptions *o) {
        unsigned width = o->width > 0 ? o->width : DEFAULT_WIDTH;
        const EpCallNode *root = ep_calltree_node(tree, 0);
        unsigned footer = o->diff ? 2 * ROW_HEIGHT : 0;
        Layout l = {
                .f = f,
                .tree = tree,
                .o = o,
                .total = (double) MAX(root->total, (uint64_t) 1),
                .graph_top = TOP_MARGIN,
                .rows = ep_calltree_max_depth(tree) + 1,
        };
        l.scale = ((double) width - 2 * PAD_X) / l.total;
        unsigned height = TOP_MARGIN + l.rows * ROW_HEIGHT + BOTTOM_MARGIN + footer;

        fprintf(f,
                "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%u\" height=\"%u\" "
                "viewBox=\"0 0 %u %u\">\n"
                "<style>\n"
                "text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: %upx; fill: #000; }\n"
                "text.title { font-family: sans-serif; font-size: 17px; }\n"
                "text.subtitle { font-family: sans-serif; font-size: 12px; fill: #555; }\n"
                "g:hover rect { stroke: #000; stroke-width: 0.7; }\n"
                "</style>\n"
                "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f4\"/>\n",
                width, height, width, height, FONT_SIZE);

        fprintf(f, "<text class=\"title\" x=\"%.1f\" y=\"24\" text-anchor=\"middle\">", width / 2.0);
        ep_svg_write_text(f, o->title ?: "Flame Graph", -1);
        fputs("</text>\n", f);
        if (o->subtitle) {
                fprintf(f, "<text class=\"subtitle\" x=\"%.1f\" y=\"42\" text-anchor=\"middle\">", width / 2.0);
                ep_svg_write_text(f, o->subtitle, -1);
                fputs("</text>\n", f);
        }

        EpFlameLegend legend[EP_FLAME_LEGEND_MAX];
        size_t n_legend = ep_flame_legend(o, legend);
        double x = PAD_X;
        for (size_t i = 0; i < n_legend; i++) {
                EpRgb c = legend[i].color;
                fprintf(f, "<rect x=\"%.0f\" y=\"52\" width=\"12\" height=\"12\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>"
                           "<text x=\"%.0f\" y=\"62\">%s</text>\n",
                        x, c.r, c.g, c.b, x + 16, legend[i].label);
                x += 16 + CHAR_WIDTH * (double) strlen(legend[i].label) + 20;
        }

        int r = ep_flame_walk(tree, draw, &l);
        if (r < 0)
                return r;
        if (o->diff)
                write_removed(&l, width, height - BOTTOM_MARGIN - ROW_HEIGHT / 2);

        fputs("</svg>\n", f);
        if (ferror(f))
                return -EIO;
        return l.drawn;
}
