/* SPDX-License-Identifier: MIT */
#pragma once

/* A self-contained SVG flame graph of a call tree: the root at the bottom (at the top with
 * icicle), each frame a rectangle as wide as its share of the samples, callees stacked above
 * (below) their callers. */

#include <stdio.h>

#include "flamegraph-model.h"

/* Returns the number of frames drawn (frames narrower than a tenth of a pixel are left out),
 * or a negative errno. */
int ep_flamegraph_write_svg(FILE *f, const EpCallTree *tree, const EpFlameOptions *o);

/* Writes s XML-escaped, with invalid UTF-8 and control characters replaced, cut to at most
 * max_chars characters ("..." marks a cut; max_chars < 0: no limit). Exposed for the tests. */
void ep_svg_write_text(FILE *f, const char *s, int max_chars);
