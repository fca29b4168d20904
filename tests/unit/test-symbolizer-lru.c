/* SPDX-License-Identifier: MIT */
/* The LRU index behind the symbolizer's file and result caches. */

#include "lru.h"
#include "test-util.h"

int main(void) {
        _cleanup_(ep_lru_freep) EpLru *l = NULL;
        bool evicted;
        uint64_t k;
        int s;

        CHECK_INT(ep_lru_new(sizeof(uint64_t), 0, &l), -EINVAL);
        CHECK_INT(ep_lru_new(sizeof(uint64_t), 3, &l), 0);

        for (k = 1; k <= 3; k++) {
                s = ep_lru_insert(l, &k, &evicted);
                CHECK(s >= 0 && s < 3);
                CHECK(!evicted);
        }
        CHECK_INT(ep_lru_size(l), 3);
        k = 2;
        CHECK_INT(ep_lru_insert(l, &k, &evicted), -EEXIST);

        /* Touch 1: 2 becomes the least recently used. */
        k = 1;
        int s1 = ep_lru_get(l, &k);
        CHECK(s1 >= 0);
        k = 2;
        int s2 = ep_lru_get(l, &k);
        k = 3;
        (void) ep_lru_get(l, &k);
        k = 1;
        (void) ep_lru_get(l, &k);

        k = 4;
        s = ep_lru_insert(l, &k, &evicted);
        CHECK(evicted);
        CHECK_INT(s, s2);
        k = 2;
        CHECK_INT(ep_lru_get(l, &k), -ENOENT);
        CHECK(*(const uint64_t *) ep_lru_slot_key(l, (uint32_t) s) == 4);

        /* Remove frees a slot that the next insert reuses without evicting. */
        k = 1;
        CHECK_INT(ep_lru_remove(l, &k), s1);
        CHECK_INT(ep_lru_remove(l, &k), -ENOENT);
        CHECK(!ep_lru_slot_key(l, (uint32_t) s1));
        k = 5;
        CHECK_INT(ep_lru_insert(l, &k, &evicted), s1);
        CHECK(!evicted);
        CHECK_INT(ep_lru_size(l), 3);

        /* The walk from the oldest: 3, 4, 5 (3 was touched before 4 and 5 went in). */
        uint64_t order[3];
        size_t n = 0;
        for (s = ep_lru_oldest(l); s >= 0; s = ep_lru_newer(l, (uint32_t) s)) {
                CHECK(n < 3);
                order[n++] = *(const uint64_t *) ep_lru_slot_key(l, (uint32_t) s);
        }
        CHECK_INT(n, 3);
        CHECK(order[0] == 3 && order[1] == 4 && order[2] == 5);
        CHECK_INT(ep_lru_newer(l, (uint32_t) s1), -ENOENT); /* 5, the newest */

        /* Churn: size never exceeds capacity, every present key maps to a unique slot. */
        _cleanup_(ep_lru_freep) EpLru *big = NULL;
        CHECK_INT(ep_lru_new(sizeof(uint64_t), 100, &big), 0);
        for (k = 0; k < 100000; k++) {
                uint64_t key = (k * 2654435761u) % 1000;
                if (ep_lru_get(big, &key) < 0)
                        CHECK(ep_lru_insert(big, &key, &evicted) >= 0);
                if (k % 7 == 0) {
                        uint64_t victim = (k * 40503u) % 1000;
                        (void) ep_lru_remove(big, &victim);
                }
                CHECK(ep_lru_size(big) <= 100);
        }
        for (uint32_t i = 0; i < 100; i++) {
                const uint64_t *key = ep_lru_slot_key(big, i);
                if (key)
                        CHECK_INT(ep_lru_get(big, key), i);
        }

        TEST_DONE("test-symbolizer-lru");
}
