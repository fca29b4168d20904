/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdio.h>

#include "calltree.h"
#include "store-read.h"

/* The line above every table: "31 samples, 2 processes, <first> → <last> (span, N intervals)". */
void ep_top_print_summary(FILE *f, const EpStoreSummary *summary);

/* Prints the function table of tree (a blank line, the column header, then up to limit rows,
 * 0: all) in the given order. */
int ep_top_print_functions(FILE *f, const EpCallTree *tree, EpFunctionOrder order, size_t limit);

/* Prints the process or thread table of `top --by`: shares of total, up to limit rows (0: all),
 * in the order given. */
void ep_top_print_groups(FILE *f, EpStoreGroupBy by, const EpStoreGroup *groups, size_t n, uint64_t total,
                         size_t limit);
