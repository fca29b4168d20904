/* SPDX-License-Identifier: MIT */
#pragma once

/* What the SVG and the HTML flame graph share: the order frames are laid out in, their
 * colours (by frame kind, or by change in a differential graph), and the differential data
 * itself. Both writers draw the same picture; only the medium differs. */

#include <stdbool.h>
#include <stdint.h>

#include "calltree.h"

typedef struct EpRgb {
        unsigned r, g, b;
} EpRgb;

/* A differential flame graph: a target call tree compared with a baseline one. Frames are
 * sized by the target; each target node knows the baseline's samples on the same call path
 * (matched by name, module and kind, level by level). Shares are of each tree's own total, so
 * windows of different lengths compare. Paths only in the baseline cannot be drawn at the
 * target's scale (they have no width); the functions that vanished altogether are listed in
 * `removed` instead. */
typedef struct EpFlameDiff {
        uint64_t target_total, baseline_total;
        uint64_t *base_total; /* per target node id: baseline samples on the same path */
        uint64_t *base_self;
        size_t n_nodes;
        double scale;               /* the share change that gets the full colour */
        EpFunctionStat *removed;    /* functions with baseline samples and none in the target,
                                     * most samples first; strings below */
        char **removed_name, **removed_module;
        size_t n_removed;
} EpFlameDiff;

int ep_flame_diff_new(const EpCallTree *target, const EpCallTree *baseline, EpFlameDiff **ret);
EpFlameDiff *ep_flame_diff_free(EpFlameDiff *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpFlameDiff *, ep_flame_diff_free);
#define _cleanup_flame_diff_ _cleanup_(ep_flame_diff_freep)

/* Change of the node's share of all samples, target minus baseline (-1 to 1). */
double ep_flame_diff_delta(const EpFlameDiff *d, const EpCallTree *target, uint32_t node);

typedef struct EpFlameOptions {
        const char *title;
        const char *subtitle; /* NULL: none */
        unsigned width;       /* pixels (SVG); 0: 1200 */
        bool icicle;          /* root at the top, callees below their callers */
        bool lines;           /* names carry "(file:line)" (--lines) */
        const EpFlameDiff *diff; /* NULL: an ordinary flame graph */
} EpFlameOptions;

/* The colour of a frame in an ordinary graph: a hue by kind, varied by a hash of the name so
 * neighbours differ but a function looks the same everywhere. */
EpRgb ep_flame_kind_color(const char *name, EpViewKind kind);
/* The colour for a share change: red grew, blue shrank, paler the smaller the change. */
EpRgb ep_flame_diff_color(const EpFlameDiff *d, double delta);
/* The colour a writer paints node with, under options o. */
EpRgb ep_flame_node_color(const EpCallTree *t, const EpFlameOptions *o, uint32_t node);

/* The legend both writers show: label and colour. */
typedef struct EpFlameLegend {
        const char *label;
        EpRgb color;
} EpFlameLegend;
#define EP_FLAME_LEGEND_MAX 5
size_t ep_flame_legend(const EpFlameOptions *o, EpFlameLegend ret[static EP_FLAME_LEGEND_MAX]);

/* Visits the tree in pre-order, children sorted by name: the left-to-right order of the graph.
 * offset is the samples left of the node within the root. visit returns > 0 to go into the
 * node's children, 0 to skip them, or a negative errno to stop the walk with. */
typedef int (*EpFlameVisit)(void *userdata, uint32_t node, uint64_t offset);
int ep_flame_walk(const EpCallTree *t, EpFlameVisit visit, void *userdata);

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
size_t ep_utf8_len(const unsigned char *s);
