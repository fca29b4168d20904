/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "calltree.h"
#include "hashmap.h"

static const char *const view_kind_names[_EP_VIEW_KIND_MAX] = {
        [EP_VIEW_ROOT] = "all",
        [EP_VIEW_PROCESS] = "process",
        [EP_VIEW_NATIVE] = "native",
        [EP_VIEW_KERNEL] = "kernel",
        [EP_VIEW_UNKNOWN] = "unknown",
        [EP_VIEW_PYTHON] = "python",
};

const char *ep_view_kind_to_string(EpViewKind k) {
        return (unsigned) k < _EP_VIEW_KIND_MAX ? view_kind_names[k] : "unknown";
}

EpViewKind ep_view_kind_from_string(const char *name) {
        for (unsigned k = 0; k < _EP_VIEW_KIND_MAX; k++)
                if (streq(view_kind_names[k], name))
                        return k;
        return EP_VIEW_NATIVE;
}

/* Key of the child index: one child per (parent, frame). */
typedef struct ChildKey {
        uint32_t parent;
        EpViewFrame frame;
} ChildKey;

struct EpCallTree {
        EpCallNode *nodes;
        size_t n_nodes, n_allocated_nodes;

        char **strings;
        uint32_t *string_next; /* next string with the same hash, UINT32_MAX ends */
        size_t n_strings, n_allocated_strings;
        EpHashmap *string_index; /* u64 hash → u32 first string id */

        EpHashmap *child_index;  /* ChildKey → u32 node id */
};

static int grow(void **p, size_t *allocated, size_t need, size_t elem) {
        if (need <= *allocated)
                return 0;
        size_t n = MAX(*allocated * 2, MAX(need, (size_t) 64));
        void *q = reallocarray(*p, n, elem);
        if (!q)
                return -ENOMEM;
        *p = q;
        *allocated = n;
        return 0;
}

int ep_calltree_new(EpCallTree **ret) {
        _cleanup_calltree_ EpCallTree *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->string_index = ep_hashmap_new(sizeof(uint64_t), sizeof(uint32_t));
        t->child_index = ep_hashmap_new(sizeof(ChildKey), sizeof(uint32_t));
        if (!t->string_index || !t->child_index)
                return -ENOMEM;

        uint32_t empty;
        int r = ep_calltree_intern(t, "", &empty);
        if (r < 0)
                return r;

        r = grow((void **) &t->nodes, &t->n_allocated_nodes, 1, sizeof(EpCallNode));
        if (r < 0)
                return r;
        uint32_t all;
        r = ep_calltree_intern(t, "all", &all);
        if (r < 0)
                return r;
        t->nodes[0] = (EpCallNode) {
                .frame = { .name = all, .module = empty, .kind = EP_VIEW_ROOT },
        };
        t->n_nodes = 1;

        *ret = TAKE_PTR(t);
        return 0;
}

EpCallTree *ep_calltree_free(EpCallTree *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_strings; i++)
                free(t->strings[i]);
        free(t->strings);
        free(t->string_next);
        free(t->nodes);
        ep_hashmap_free(t->string_index);
        ep_hashmap_free(t->child_index);
        free(t);
        return NULL;
}

int ep_calltree_intern(EpCallTree *t, const char *s, uint32_t *ret_id) {
        if (!s)
                s = "";
        size_t len = strlen(s);
        uint64_t h = ep_hash_bytes(s, len);

        uint32_t *head = ep_hashmap_get(t->string_index, &h);
        if (head)
                for (uint32_t i = *head; i != UINT32_MAX; i = t->string_next[i])
                        if (streq(t->strings[i], s)) {
                                *ret_id = i;
                                return 0;
                        }

        if (t->n_strings >= UINT32_MAX - 1)
                return -E2BIG;
        size_t allocated = t->n_allocated_strings;
        int r = grow((void **) &t->strings, &allocated, t->n_strings + 1, sizeof(char *));
        if (r < 0)
                return r;
        allocated = t->n_allocated_strings;
        r = grow((void **) &t->string_next, &allocated, t->n_strings + 1, sizeof(uint32_t));
        if (r < 0)
                return r;
        t->n_allocated_strings = allocated;

        char *copy = strndup(s, len);
        if (!copy)
                return -ENOMEM;

        uint32_t id = (uint32_t) t->n_strings;
        void *v;
        r = ep_hashmap_put(t->string_index, &h, &v);
        if (r < 0) {
                free(copy);
                return r;
        }
        /* New strings go to the front of their hash chain. */
        t->string_next[id] = r > 0 ? UINT32_MAX : *(uint32_t *) v;
        *(uint32_t *) v = id;
        t->strings[id] = copy;
        t->n_strings++;

        *ret_id = id;
        return 0;
}

const char *ep_calltree_string(const EpCallTree *t, uint32_t id) {
        return id < t->n_strings ? t->strings[id] : "";
}

int ep_calltree_child(EpCallTree *t, uint32_t parent, const EpViewFrame *frame, uint32_t *ret_node) {
        ChildKey key;
        memset(&key, 0, sizeof(key));
        key.parent = parent;
        key.frame = *frame;

        void *v;
        int r = ep_hashmap_put(t->child_index, &key, &v);
        if (r < 0)
                return r;
        if (r == 0) {
                *ret_node = *(uint32_t *) v;
                return 0;
        }

        if (t->n_nodes >= UINT32_MAX ||
            grow((void **) &t->nodes, &t->n_allocated_nodes, t->n_nodes + 1, sizeof(EpCallNode)) < 0) {
                (void) ep_hashmap_remove(t->child_index, &key, NULL);
                return -ENOMEM;
        }

        uint32_t id = (uint32_t) t->n_nodes++;
        *(uint32_t *) v = id;
        EpCallNode *p = &t->nodes[parent];
        t->nodes[id] = (EpCallNode) {
                .frame = *frame,
                .parent = parent,
                .next_sibling = p->first_child,
                .depth = p->depth + 1,
        };
        p->first_child = id;

        *ret_node = id;
        return 0;
}

int ep_calltree_add(EpCallTree *t, uint32_t base, const EpViewFrame *leaf_first, size_t n,
                    uint64_t count) {
        uint32_t node = base;
        int r;

        for (size_t i = n; i > 0; i--) {
                r = ep_calltree_child(t, node, &leaf_first[i - 1], &node);
                if (r < 0)
                        return r;
        }

        t->nodes[node].self += count;
        for (uint32_t p = node;; p = t->nodes[p].parent) {
                t->nodes[p].total += count;
                if (p == 0)
                        break;
        }
        return 0;
}

size_t ep_calltree_size(const EpCallTree *t) {
        return t->n_nodes;
}

const EpCallNode *ep_calltree_node(const EpCallTree *t, uint32_t id) {
        return id < t->n_nodes ? &t->nodes[id] : NULL;
}

uint32_t ep_calltree_max_depth(const EpCallTree *t) {
        uint32_t d = 0;
        for (size_t i = 0; i < t->n_nodes; i++)
                d = MAX(d, t->nodes[i].depth);
        return d;
}

static int frame_cmp(const EpCallTree *t, const EpViewFrame *a, const EpViewFrame *b) {
        int c = strcmp(ep_calltree_string(t, a->name), ep_calltree_string(t, b->name));
        if (c != 0)
                return c;
        c = strcmp(ep_calltree_string(t, a->module), ep_calltree_string(t, b->module));
        if (c != 0)
                return c;
        return (a->kind > b->kind) - (a->kind < b->kind);
}

static _Thread_local const EpCallTree *sort_tree;

static int child_cmp(const void *a, const void *b) {
        return frame_cmp(sort_tree, &sort_tree->nodes[*(const uint32_t *) a].frame,
                         &sort_tree->nodes[*(const uint32_t *) b].frame);
}

int ep_calltree_children_sorted(const EpCallTree *t, uint32_t node, uint32_t **ret, size_t *ret_n) {
        size_t n = 0;
        for (uint32_t c = t->nodes[node].first_child; c != 0; c = t->nodes[c].next_sibling)
                n++;

        _cleanup_free_ uint32_t *a = malloc(MAX(n, (size_t) 1) * sizeof(uint32_t));
        if (!a)
                return -ENOMEM;
        size_t i = 0;
        for (uint32_t c = t->nodes[node].first_child; c != 0; c = t->nodes[c].next_sibling)
                a[i++] = c;

        sort_tree = t;
        qsort(a, n, sizeof(uint32_t), child_cmp);
        sort_tree = NULL;

        *ret = TAKE_PTR(a);
        *ret_n = n;
        return 0;
}

typedef struct FunctionAcc {
        EpFunctionStat *stats;
        uint32_t *on_path; /* how often the function is on the current root→node path */
        size_t n, allocated;
        EpHashmap *index; /* EpViewFrame → u32 */
} FunctionAcc;

static int function_enter(FunctionAcc *acc, const EpCallNode *node) {
        void *v;
        int r = ep_hashmap_put(acc->index, &node->frame, &v);
        if (r < 0)
                return r;
        if (r > 0) {
                size_t allocated = acc->allocated;
                r = grow((void **) &acc->stats, &allocated, acc->n + 1, sizeof(EpFunctionStat));
                if (r < 0)
                        return r;
                allocated = acc->allocated;
                r = grow((void **) &acc->on_path, &allocated, acc->n + 1, sizeof(uint32_t));
                if (r < 0)
                        return r;
                acc->allocated = allocated;
                *(uint32_t *) v = (uint32_t) acc->n;
                acc->stats[acc->n] = (EpFunctionStat) { .frame = node->frame };
                acc->on_path[acc->n] = 0;
                acc->n++;
        }

        uint32_t i = *(uint32_t *) v;
        /* The outermost occurrence on the path carries the stack's samples; recursive calls
         * below it must not count them again. */
        if (acc->on_path[i]++ == 0)
                acc->stats[i].total += node->total;
        acc->stats[i].self += node->self;
        return 0;
}

static void function_leave(FunctionAcc *acc, const EpCallNode *node) {
        uint32_t *i = ep_hashmap_get(acc->index, &node->frame);
        if (i)
                acc->on_path[*i]--;
}

static _Thread_local const EpCallTree *stat_tree;

static int desc(uint64_t a, uint64_t b) {
        return (a < b) - (a > b);
}

static int stat_cmp_self(const void *a, const void *b) {
        const EpFunctionStat *x = a, *y = b;
        return desc(x->self, y->self) ?: desc(x->total, y->total) ?: frame_cmp(stat_tree, &x->frame, &y->frame);
}

static int stat_cmp_total(const void *a, const void *b) {
        const EpFunctionStat *x = a, *y = b;
        return desc(x->total, y->total) ?: desc(x->self, y->self) ?: frame_cmp(stat_tree, &x->frame, &y->frame);
}

void ep_calltree_sort_functions(const EpCallTree *t, EpFunctionStat *stats, size_t n, EpFunctionOrder order) {
        if (n == 0)
                return;
        stat_tree = t;
        qsort(stats, n, sizeof(EpFunctionStat), order == EP_FUNCTIONS_BY_TOTAL ? stat_cmp_total : stat_cmp_self);
        stat_tree = NULL;
}

static bool is_function(const EpCallNode *n) {
        return n->frame.kind != EP_VIEW_ROOT && n->frame.kind != EP_VIEW_PROCESS;
}

int ep_calltree_functions(const EpCallTree *t, EpFunctionStat **ret, size_t *ret_n) {
        FunctionAcc acc = {};
        int r = 0;

        acc.index = ep_hashmap_new(sizeof(EpViewFrame), sizeof(uint32_t));
        if (!acc.index)
                return -ENOMEM;

        /* Depth-first walk without recursion: stacks can be thousands of frames deep. */
        uint32_t n = t->nodes[0].first_child;
        while (n != 0) {
                const EpCallNode *node = &t->nodes[n];
                if (is_function(node)) {
                        r = function_enter(&acc, node);
                        if (r < 0)
                                goto finish;
                }
                if (node->first_child != 0) {
                        n = node->first_child;
                        continue;
                }
                /* Leave this node and every ancestor whose children are all done. */
                for (;;) {
                        node = &t->nodes[n];
                        if (is_function(node))
                                function_leave(&acc, node);
                        if (node->next_sibling != 0) {
                                n = node->next_sibling;
                                break;
                        }
                        n = node->parent;
                        if (n == 0)
                                break;
                }
        }

        ep_calltree_sort_functions(t, acc.stats, acc.n, EP_FUNCTIONS_BY_SELF);

        *ret = TAKE_PTR(acc.stats);
        *ret_n = acc.n;
finish:
        free(acc.stats);
        free(acc.on_path);
        ep_hashmap_free(acc.index);
        return r;
}
