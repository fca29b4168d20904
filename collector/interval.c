/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "interval.h"
#include "macro.h"

int interval_new(uint64_t seq, uint64_t start_ns, Interval **ret) {
        Interval *iv = calloc(1, sizeof(Interval));

        if (!iv)
                return -ENOMEM;
        iv->seq = seq;
        iv->start_ns = start_ns;
        iv->samples = ep_hashmap_new(sizeof(SampleKey), sizeof(SampleAgg));
        if (!iv->samples) {
                free(iv);
                return -ENOMEM;
        }
        *ret = iv;
        return 0;
}

Interval *interval_free(Interval *iv) {
        size_t state = 0;
        const void *k;
        void *v;

        if (!iv)
                return NULL;
        while (ep_hashmap_iterate(iv->samples, &state, &k, &v))
                free(((SampleAgg *) v)->ts);
        ep_hashmap_free(iv->samples);
        free(iv);
        return NULL;
}

int interval_add(Interval *iv, const SampleKey *key, const char *thread_name, uint64_t time_ns,
                 bool keep_timestamp) {
        SampleAgg *a;
        int r;

        r = ep_hashmap_put(iv->samples, key, (void **) &a);
        if (r < 0)
                return r;
        if (r > 0 || a->thread_name[0] == 0)
                snprintf(a->thread_name, sizeof(a->thread_name), "%s", thread_name ?: "");

        if (keep_timestamp) {
                if (a->n_ts == a->cap_ts) {
                        uint32_t n = a->cap_ts ? a->cap_ts * 2 : 4;
                        uint64_t *ts;

                        if (n < a->cap_ts)
                                return -ENOMEM;
                        ts = realloc(a->ts, (size_t) n * sizeof(uint64_t));
                        if (!ts)
                                return -ENOMEM;
                        a->ts = ts;
                        a->cap_ts = n;
                }
                a->ts[a->n_ts++] = time_ns;
        }
        a->count++;
        iv->n_samples++;
        return 0;
}
