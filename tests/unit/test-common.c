/* SPDX-License-Identifier: MIT */
#include <fcntl.h>

#include "daemon.h"
#include "file-id.h"
#include "hashmap.h"
#include "log.h"
#include "tests.h"
#include "wire-buf.h"

static void test_hashmap(void) {
        _cleanup_hashmap_ EpHashmap *h = ep_hashmap_new(sizeof(uint64_t), sizeof(uint32_t));
        uint32_t *v, removed;
        size_t state = 0, seen = 0;
        const void *k;

        ASSERT_TRUE(h);
        for (uint64_t i = 0; i < 5000; i++) {
                ASSERT_EQ(ep_hashmap_put(h, &i, (void **) &v), 1);
                *v = (uint32_t) (i * 3);
        }
        uint64_t again = 77;
        ASSERT_EQ(ep_hashmap_put(h, &again, (void **) &v), 0);
        ASSERT_EQ(*v, 231);
        /* Remove every other key; the rest must stay reachable across the backward shifts. */
        for (uint64_t i = 0; i < 5000; i += 2) {
                ASSERT_EQ(ep_hashmap_remove(h, &i, &removed), 1);
                ASSERT_EQ(removed, i * 3);
        }
        ASSERT_EQ(ep_hashmap_size(h), 2500);
        for (uint64_t i = 0; i < 5000; i++) {
                v = ep_hashmap_get(h, &i);
                if (i % 2)
                        ASSERT_TRUE(v && *v == i * 3);
                else
                        ASSERT_TRUE(!v);
        }
        while (ep_hashmap_iterate(h, &state, &k, (void **) &v)) {
                uint64_t key;
                memcpy(&key, k, sizeof key);
                ASSERT_EQ(*v, key * 3);
                seen++;
        }
        ASSERT_EQ(seen, 2500);
        ep_hashmap_clear(h);
        ASSERT_EQ(ep_hashmap_size(h), 0);
        ASSERT_TRUE(!ep_hashmap_get(h, &again));
}

static void test_wire_buf(void) {
        uint8_t buf[64];
        EpWriter w;
        EpReader r;
        _cleanup_free_ char *s1 = NULL, *s2 = NULL;
        size_t n;

        ep_writer_init(&w, buf, sizeof buf);
        ep_put_u32(&w, 7);
        ep_put_str(&w, "gamma");
        ep_put_u64(&w, UINT64_MAX);
        ep_put_str(&w, NULL);
        ASSERT_TRUE(!w.overflow);

        ep_reader_init(&r, buf, w.size);
        ASSERT_EQ(ep_get_u32(&r), 7);
        s1 = ep_get_str(&r, 100);
        ASSERT_STREQ(s1, "gamma");
        ASSERT_TRUE(ep_get_u64(&r) == UINT64_MAX);
        s2 = ep_get_str(&r, 100);
        ASSERT_STREQ(s2, "");
        ASSERT_TRUE(ep_reader_done(&r));

        /* Truncated input and lying lengths are errors, never over-reads. */
        ep_reader_init(&r, buf, 6);
        (void) ep_get_u32(&r);
        ASSERT_TRUE(ep_get_blob(&r, 100, &n) != NULL || r.error);
        ASSERT_TRUE(r.error);
        ep_reader_init(&r, buf + 4, 9); /* "gamma" length 5 + 4 = 9 ok; max_len 3 refuses */
        ASSERT_TRUE(ep_get_str(&r, 3) == NULL && r.error);

        /* A fixed writer records overflow; a dynamic one grows. */
        ep_writer_init(&w, buf, 8);
        ep_put_str(&w, "too long for eight");
        ASSERT_TRUE(w.overflow);
        ep_writer_init_dynamic(&w);
        for (int i = 0; i < 1000; i++)
                ep_put_u64(&w, i);
        ASSERT_TRUE(!w.overflow && w.size == 8000);
        ep_writer_done(&w);
}

static void test_file_id(void) {
        /* htlhash of a 10-byte file "0123456789": head and tail overlap to the whole file, so
         * it is sha256("0123456789" "0123456789" 00 00 00 00 00 00 00 0a)[:16], computed
         * independently with Python's hashlib. */
        char path[] = "/tmp/ep-fileid-XXXXXX", hex[33];
        uint8_t id[EP_FILE_ID_SIZE];
        uint64_t size;
        _cleanup_close_ int fd = mkstemp(path);

        ASSERT_TRUE(fd >= 0);
        unlink(path);
        ASSERT_EQ(write(fd, "0123456789", 10), 10);
        ASSERT_OK(ep_file_id_from_fd(fd, id, &size));
        ASSERT_EQ(size, 10);
        ep_file_id_to_hex(id, hex);
        ASSERT_STREQ(hex, "6b08e12ebaacbe995643c9cfbf4720bc");
}

static void test_parse(void) {
        uint64_t v;
        ASSERT_OK(ep_parse_duration("20", &v));
        ASSERT_TRUE(v == 20 * NSEC_PER_SEC);
        ASSERT_OK(ep_parse_duration("1.5s", &v));
        ASSERT_TRUE(v == 1500 * NSEC_PER_MSEC);
        ASSERT_OK(ep_parse_duration("10m", &v));
        ASSERT_TRUE(v == 600 * NSEC_PER_SEC);
        ASSERT_OK(ep_parse_duration("250ms", &v));
        ASSERT_TRUE(v == 250 * NSEC_PER_MSEC);
        ASSERT_EQ(ep_parse_duration("ten", &v), -EINVAL);
        ASSERT_EQ(ep_parse_duration("-1s", &v), -EINVAL);
        ASSERT_EQ(ep_parse_duration("5 parsecs", &v), -EINVAL);
        ASSERT_OK(ep_parse_uint("99", 1, 100, &v));
        ASSERT_EQ(v, 99);
        ASSERT_EQ(ep_parse_uint("101", 1, 100, &v), -ERANGE);
        ASSERT_EQ(ep_parse_uint("12abc", 1, 100, &v), -EINVAL);
        ASSERT_EQ(ep_parse_uint("", 1, 100, &v), -EINVAL);
        ASSERT_EQ(log_parse_level("debug"), LOG_DEBUG);
        ASSERT_EQ(log_parse_level("loud"), -EINVAL);
}

int main(void) {
        test_hashmap();
        test_wire_buf();
        test_file_id();
        test_parse();
        return tests_summary("common");
}
