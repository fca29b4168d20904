/* SPDX-License-Identifier: MIT */
#pragma once

/* A self-contained interactive HTML flame graph: the page template (flamegraph.html, compiled
 * in) with the call tree embedded as JSON. Nothing is fetched: scripts, styles and data are
 * all in the one file.
 *
 * The JSON (the template's single @EP_FLAME_DATA@) is:
 *   { "version": 1, "title", "subtitle", "icicle", "lines", "total",
 *     "legend": [[label, 0xRRGGBB]...], "kinds": [name of EpViewKind...],
 *     "strings": [...],                         the tree's interned strings
 *     "frames": [[name, module, kind, colour]...],   distinct frames, strings by index
 *     "stride": 4 | 7,
 *     "nodes": [frame, depth, total, self (, base_total, base_self, colour)...],
 *              flat, in pre-order with children sorted by name: the graph's left-to-right
 *              order, so a node's subtree is the run of nodes after it that are deeper
 *     "diff": null | { "targetTotal", "baselineTotal",
 *                      "removed": [[name, module, baseline total, baseline self]...] } }
 * Colours are computed here (flamegraph-model.c), so the page and the SVG agree. */

#include <stdio.h>

#include "flamegraph-model.h"

#define EP_FLAME_DATA_PLACEHOLDER "@EP_FLAME_DATA@"

/* Returns the number of frames embedded, or a negative errno. */
int ep_flamegraph_write_html(FILE *f, const EpCallTree *tree, const EpFlameOptions *o);

/* Writes s as a JSON string that is also safe inside an HTML <script> element: '<', '>' and
 * '&' are escaped (no "</script>" or "<!--" can appear), as are U+2028 and U+2029 and control
 * characters; invalid UTF-8 becomes U+FFFD. Exposed for the tests. */
void ep_json_write_string(FILE *f, const char *s);
