/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdio.h>

#include "calltree.h"
#include "store-read.h"

/* Prints the hottest functions of tree: a header with the summary, then up to limit rows
 * (0: all) sorted by self samples. */
int ep_top_print(FILE *f, const EpCallTree *tree, const EpStoreSummary *summary, size_t limit);
