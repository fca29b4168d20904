/* SPDX-License-Identifier: MIT */
#pragma once

/* The call tree the views share: root ("all") → one node per process ("comm (pid)") → frames
 * from the outermost caller to the leaf, with inlined functions expanded into frames of their
 * own. Node 0 is the root. Strings (function names, modules) are interned: a node names them
 * by id. top derives its function table from the tree, the flame graph draws it. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

typedef enum EpViewKind {
        EP_VIEW_ROOT,
        EP_VIEW_PROCESS,
        EP_VIEW_NATIVE,  /* symbolized user-space code */
        EP_VIEW_KERNEL,  /* kernel code, symbolized or not */
        EP_VIEW_UNKNOWN, /* unsymbolized, unmapped, unwinding stopped */
        EP_VIEW_PYTHON,  /* interpreted Python code (CPython frames) */
        _EP_VIEW_KIND_MAX,
} EpViewKind;

/* The kind's name ("native", "python", ...): the legend's labels, the HTML graph's kinds and
 * the frame-kind table's view classes (common/frame-kind.c). */
const char *ep_view_kind_to_string(EpViewKind k);
/* The kind named so; a name no view kind has is shown as native code. */
EpViewKind ep_view_kind_from_string(const char *name);

/* One frame as the views show it. */
typedef struct EpViewFrame {
        uint32_t name;   /* string id */
        uint32_t module; /* string id: file basename, kernel module, or "" */
        uint32_t kind;   /* EpViewKind */
} EpViewFrame;

typedef struct EpCallNode {
        EpViewFrame frame;
        uint32_t parent;
        uint32_t first_child; /* 0: none (the root is never a child) */
        uint32_t next_sibling;
        uint32_t depth;       /* root = 0, processes = 1 */
        uint64_t self;        /* samples whose stack ends here */
        uint64_t total;       /* samples whose stack passes through here */
} EpCallNode;

typedef struct EpCallTree EpCallTree;

int ep_calltree_new(EpCallTree **ret);
EpCallTree *ep_calltree_free(EpCallTree *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpCallTree *, ep_calltree_free);
#define _cleanup_calltree_ _cleanup_(ep_calltree_freep)

/* Interns s; the same string always gets the same id. The empty string is id 0. */
int ep_calltree_intern(EpCallTree *t, const char *s, uint32_t *ret_id);
const char *ep_calltree_string(const EpCallTree *t, uint32_t id);

/* Finds or creates the child of parent that shows frame. */
int ep_calltree_child(EpCallTree *t, uint32_t parent, const EpViewFrame *frame, uint32_t *ret_node);

/* Adds count samples of a stack below node `base` (a process node). frames are leaf first, as
 * stored; the path is created root first. With n == 0 the samples are self samples of base. */
int ep_calltree_add(EpCallTree *t, uint32_t base, const EpViewFrame *leaf_first, size_t n,
                    uint64_t count);

size_t ep_calltree_size(const EpCallTree *t);
const EpCallNode *ep_calltree_node(const EpCallTree *t, uint32_t id);
uint32_t ep_calltree_max_depth(const EpCallTree *t);
/* The children of node, sorted by name (then module, then kind), in a new array. */
int ep_calltree_children_sorted(const EpCallTree *t, uint32_t node, uint32_t **ret,
                                size_t *ret_n);

/* The function table top shows: self samples (leaf frame) and total samples (anywhere in the
 * stack, counted once per stack even under recursion), one entry per distinct frame. */
typedef struct EpFunctionStat {
        EpViewFrame frame;
        uint64_t self;
        uint64_t total;
} EpFunctionStat;

/* Sorted by self, then total (descending), then name. Root and process nodes are not
 * functions and are left out. */
int ep_calltree_functions(const EpCallTree *t, EpFunctionStat **ret, size_t *ret_n);

typedef enum EpFunctionOrder {
        EP_FUNCTIONS_BY_SELF,  /* self, then total, descending, then name */
        EP_FUNCTIONS_BY_TOTAL, /* total, then self, descending, then name */
        _EP_FUNCTIONS_ORDER_MAX,
} EpFunctionOrder;

/* Sorts a function table of t again. */
void ep_calltree_sort_functions(const EpCallTree *t, EpFunctionStat *stats, size_t n, EpFunctionOrder order);
