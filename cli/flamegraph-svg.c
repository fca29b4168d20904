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

typedef struct Rgb {
        unsigned r, g, b;
} Rgb;

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s) {
        unsigned char c = s[0];
        size_t n;
        uint32_t cp;

        if (c < 0x80)
                return 1;
        if ((c & 0xe0) == 0xc0) {
                n = 2;
                cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
                n = 3;
                cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
                n = 4;
                cp = c & 0x07;
        } else
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        /* Overlong forms, surrogates, beyond Unicode. */
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return 0;
        return n;
}

static size_t utf8_chars(const char *s) {
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *) s; *p; n++) {
                size_t l = utf8_len(p);
                p += l ? l : 1;
        }
        return n;
}

void ep_svg_write_text(FILE *f, const char *s, int max_chars) {
        const unsigned char *p = (const unsigned char *) s;
        bool cut = max_chars >= 0 && utf8_chars(s) > (size_t) max_chars;
        int budget = cut ? MAX(max_chars - 3, 0) : -1;

        for (int written = 0; *p && (budget < 0 || written < budget); written++) {
                size_t l = utf8_len(p);
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

static double unit_hash(const char *s, unsigned salt) {
        uint64_t h = ep_hash_bytes(s, strlen(s)) ^ (0x9e3779b97f4a7c15ULL * (salt + 1));
        /* Mix once more so each salt gives an independent-looking value. */
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
        return (double) (h >> 11) / (double) (1ULL << 53);
}

static Rgb frame_color(const char *name, EpViewKind kind) {
        double a = unit_hash(name, 0), b = unit_hash(name, 1);

        switch (kind) {
        case EP_VIEW_NATIVE: /* warm: red to yellow */
                return (Rgb) { 215 + (unsigned) (40 * b), 90 + (unsigned) (140 * a), 40 + (unsigned) (40 * b) };
        case EP_VIEW_KERNEL: /* cool blue */
                return (Rgb) { 70 + (unsigned) (60 * a), 150 + (unsigned) (60 * b), 215 + (unsigned) (40 * a) };
        case EP_VIEW_PROCESS: /* green */
                return (Rgb) { 110 + (unsigned) (50 * a), 195 + (unsigned) (40 * b), 110 + (unsigned) (40 * a) };
        case EP_VIEW_ROOT:
                return (Rgb) { 200, 190, 225 };
        case EP_VIEW_UNKNOWN:
        default: /* grey */
                return (Rgb) { 175 + (unsigned) (35 * a), 175 + (unsigned) (35 * a), 175 + (unsigned) (35 * a) };
        }
}

typedef struct Layout {
        FILE *f;
        const EpCallTree *tree;
        double total;       /* samples of the root */
        double scale;       /* pixels per sample */
        unsigned height;
        int drawn;
} Layout;

static int draw(Layout *l, uint32_t id, uint64_t offset) {
        const EpCallNode *node = ep_calltree_node(l->tree, id);
        double w = (double) node->total * l->scale;
        if (w < MIN_WIDTH)
                return 0;

        double x = PAD_X + (double) offset * l->scale;
        unsigned y = l->height - BOTTOM_MARGIN - (node->depth + 1) * ROW_HEIGHT;
        const char *name = ep_calltree_string(l->tree, node->frame.name);
        const char *module = ep_calltree_string(l->tree, node->frame.module);
        Rgb c = frame_color(name, node->frame.kind);

        fputs("<g><title>", l->f);
        ep_svg_write_text(l->f, name, -1);
        if (*module) {
                fputs(" in ", l->f);
                ep_svg_write_text(l->f, module, -1);
        }
        fprintf(l->f, " (%" PRIu64 " sample%s, %.2f%%)</title>", node->total, node->total == 1 ? "" : "s",
                100.0 * (double) node->total / l->total);
        fprintf(l->f, "<rect x=\"%.2f\" y=\"%u\" width=\"%.2f\" height=\"%u\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>",
                x, y, w, FRAME_HEIGHT, c.r, c.g, c.b);
        int chars = (int) ((w - 6) / CHAR_WIDTH);
        if (chars >= 3) {
                fprintf(l->f, "<text x=\"%.2f\" y=\"%u\">", x + 3, y + FRAME_HEIGHT - 4);
                ep_svg_write_text(l->f, name, chars);
                fputs("</text>", l->f);
        }
        fputs("</g>\n", l->f);
        l->drawn++;

        _cleanup_free_ uint32_t *children = NULL;
        size_t n;
        int r = ep_calltree_children_sorted(l->tree, id, &children, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = draw(l, children[i], offset);
                if (r < 0)
                        return r;
                offset += ep_calltree_node(l->tree, children[i])->total;
        }
        return 0;
}

static void legend(FILE *f, double x, unsigned y, EpViewKind kind, const char *label) {
        Rgb c = frame_color(label, kind);
        fprintf(f, "<rect x=\"%.0f\" y=\"%u\" width=\"12\" height=\"12\" fill=\"rgb(%u,%u,%u)\" rx=\"2\"/>"
                   "<text x=\"%.0f\" y=\"%u\">%s</text>\n",
                x, y - 10, c.r, c.g, c.b, x + 16, y, label);
}

int ep_flamegraph_write_svg(FILE *f, const EpCallTree *tree, const EpFlameOptions *o) {
        unsigned width = o->width > 0 ? o->width : DEFAULT_WIDTH;
        const EpCallNode *root = ep_calltree_node(tree, 0);
        Layout l = {
                .f = f,
                .tree = tree,
                .total = (double) MAX(root->total, (uint64_t) 1),
                .height = TOP_MARGIN + (ep_calltree_max_depth(tree) + 1) * ROW_HEIGHT + BOTTOM_MARGIN,
        };
        l.scale = ((double) width - 2 * PAD_X) / l.total;

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
                width, l.height, width, l.height, FONT_SIZE);

        fprintf(f, "<text class=\"title\" x=\"%.1f\" y=\"24\" text-anchor=\"middle\">", width / 2.0);
        ep_svg_write_text(f, o->title ?: "Flame Graph", -1);
        fputs("</text>\n", f);
        if (o->subtitle) {
                fprintf(f, "<text class=\"subtitle\" x=\"%.1f\" y=\"42\" text-anchor=\"middle\">", width / 2.0);
                ep_svg_write_text(f, o->subtitle, -1);
                fputs("</text>\n", f);
        }
        legend(f, PAD_X, 62, EP_VIEW_NATIVE, "native");
        legend(f, PAD_X + 80, 62, EP_VIEW_KERNEL, "kernel");
        legend(f, PAD_X + 160, 62, EP_VIEW_UNKNOWN, "unknown");
        legend(f, PAD_X + 250, 62, EP_VIEW_PROCESS, "process");

        int r = draw(&l, 0, 0);
        if (r < 0)
                return r;

        fputs("</svg>\n", f);
        if (ferror(f))
                return -EIO;
        return l.drawn;
}
