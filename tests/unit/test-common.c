/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <sys/stat.h>

#include "daemon.h"
#include "file-id.h"
#include "frame-kind.h"
#include "hashmap.h"
#include "log.h"
#include "sha256.h"
#include "sysctl.h"
#include "tests.h"
#include "utf8.h"
#include "wire-buf.h"

/* Counters: absent counts 0, a count back at 0 is removed. */
static void test_hashmap_counts(void) {
        _cleanup_hashmap_ EpHashmap *h = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        uint32_t a = 1000, b = 1001;

        ASSERT_TRUE(h);
        ASSERT_EQ(ep_hashmap_count(h, &a), 0);
        ASSERT_OK(ep_hashmap_count_add(h, &a, 1));
        ASSERT_OK(ep_hashmap_count_add(h, &a, 1));
        ASSERT_OK(ep_hashmap_count_add(h, &b, 1));
        ASSERT_EQ(ep_hashmap_count(h, &a), 2);
        ASSERT_OK(ep_hashmap_count_add(h, &a, -1));
        ASSERT_OK(ep_hashmap_count_add(h, &a, -1));
        ASSERT_EQ(ep_hashmap_count(h, &a), 0);
        ASSERT_EQ(ep_hashmap_size(h), 1u);
}

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
        EpFileIdentity ident;
        _cleanup_close_ int fd = mkstemp(path);

        ASSERT_TRUE(fd >= 0);
        unlink(path);
        ASSERT_EQ(write(fd, "0123456789", 10), 10);
        ASSERT_OK(ep_file_identify(fd, &ident));
        ASSERT_EQ(ident.size, 10);
        ep_file_id_to_hex(ident.htlhash, hex);
        ASSERT_STREQ(hex, "6b08e12ebaacbe995643c9cfbf4720bc");
}

/* A file's ID is its htlhash only when no unprivileged user chose its content: a copy of a
 * system file's first and last pages and size names itself, not the system file. */
static void test_file_id_of_a_user_file(void) {
        _cleanup_close_ int sys = open("/bin/sh", O_RDONLY | O_CLOEXEC), a = -EBADF, b = -EBADF;
        char pa[] = "/tmp/ep-fileid-a-XXXXXX", pb[] = "/tmp/ep-fileid-b-XXXXXX";
        EpFileIdentity s, ia, ib, again;
        uint8_t id[EP_FILE_ID_SIZE];

        ASSERT_TRUE(sys >= 0); /* root's, 0755 */
        ASSERT_OK(ep_file_identify(sys, &s));
        ASSERT_TRUE(s.system);
        ASSERT_EQ(memcmp(s.id, s.htlhash, EP_FILE_ID_SIZE), 0);
        ASSERT_OK(ep_file_id_from_fd(sys, id, NULL));
        ASSERT_EQ(memcmp(id, s.id, EP_FILE_ID_SIZE), 0);

        /* Two files of one content, writable by all (or a user's): two IDs, one htlhash. */
        a = mkstemp(pa);
        b = mkstemp(pb);
        ASSERT_TRUE(a >= 0 && b >= 0);
        unlink(pa);
        unlink(pb);
        ASSERT_EQ(write(a, "same content", 12), 12);
        ASSERT_EQ(write(b, "same content", 12), 12);
        ASSERT_OK(fchmod(a, 0666) < 0 ? -errno : 0);
        ASSERT_OK(fchmod(b, 0620) < 0 ? -errno : 0);
        ASSERT_OK(ep_file_identify(a, &ia));
        ASSERT_OK(ep_file_identify(b, &ib));
        ASSERT_TRUE(!ia.system && !ib.system);
        ASSERT_EQ(memcmp(ia.htlhash, ib.htlhash, EP_FILE_ID_SIZE), 0);
        ASSERT_TRUE(memcmp(ia.id, ia.htlhash, EP_FILE_ID_SIZE) != 0);
        ASSERT_TRUE(memcmp(ia.id, ib.id, EP_FILE_ID_SIZE) != 0);
        ASSERT_OK(ep_file_identify(a, &again)); /* the same file, the same ID */
        ASSERT_EQ(memcmp(ia.id, again.id, EP_FILE_ID_SIZE), 0);

        /* Root's and written by root only: a system file (when we are root to make one). */
        if (geteuid() == 0) {
                ASSERT_OK(fchmod(a, 0644) < 0 ? -errno : 0);
                ASSERT_OK(ep_file_identify(a, &again));
                ASSERT_TRUE(again.system);
                ASSERT_EQ(memcmp(again.id, again.htlhash, EP_FILE_ID_SIZE), 0);
                ASSERT_OK(fchown(a, 65534, 65534) < 0 ? -errno : 0);
                ASSERT_OK(ep_file_identify(a, &again));
                ASSERT_TRUE(!again.system);
        }
}

static void check_sha256(const void *data, size_t n, size_t piece, const char *want) {
        uint8_t digest[EP_SHA256_SIZE];
        char hex[2 * EP_SHA256_SIZE + 1];
        const uint8_t *p = data;
        EpSha256 s;

        ep_sha256_init(&s);
        for (size_t off = 0; off < n; off += piece)
                ep_sha256_update(&s, p + off, n - off < piece ? n - off : piece);
        ep_sha256_final(&s, digest);
        ep_hex_encode(digest, sizeof digest, hex);
        ASSERT_STREQ(hex, want);
}

static void test_sha256(void) {
        /* FIPS 180-2 appendix B's examples, then lengths around the padding's block
         * boundaries (55 bytes still fit the length in the block, 56 do not), all hashed in
         * one piece and in odd pieces; the expected values are Python's hashlib's. */
        static const struct {
                size_t n;
                const char *want;
        } xs[] = {
                { 55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072" },
                { 56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e" },
                { 63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2" },
                { 64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c" },
                { 65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9" },
                { 119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c" },
                { 120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98" },
        };
        static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        static char x[120], a[1000000];
        uint8_t digest[EP_SHA256_SIZE];
        char hex[2 * EP_SHA256_SIZE + 1];

        check_sha256("", 0, 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        check_sha256("abc", 3, 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        check_sha256(two_blocks, strlen(two_blocks), 7,
                     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        memset(a, 'a', sizeof a);
        check_sha256(a, sizeof a, 4099, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
        memset(x, 'x', sizeof x);
        for (size_t i = 0; i < ELEMENTSOF(xs); i++) {
                check_sha256(x, xs[i].n, xs[i].n, xs[i].want);
                check_sha256(x, xs[i].n, 13, xs[i].want);
        }
        ep_sha256(a, sizeof a, digest); /* the one-call form */
        ep_hex_encode(digest, sizeof digest, hex);
        ASSERT_STREQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
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

static void test_utf8(void) {
        static const struct {
                const char *s;
                size_t n, len;
                uint32_t cp;
        } cases[] = {
                { "a", 1, 1, 'a' },
                { "\xc3\xa9", 2, 2, 0xe9 },          /* é */
                { "\xe2\x82\xac", 3, 3, 0x20ac },    /* € */
                { "\xf0\x9f\x90\x8d", 4, 4, 0x1f40d }, /* a snake */
                { "\xc3\xa9", 1, 0, 0 },             /* cut off */
                { "\xc0\xaf", 2, 0, 0 },             /* overlong '/' */
                { "\xed\xa0\x80", 3, 0, 0 },         /* a surrogate */
                { "\xf4\x90\x80\x80", 4, 0, 0 },     /* beyond U+10FFFF */
                { "\x80", 1, 0, 0 },                 /* a lone continuation byte */
        };
        char enc[4];

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint32_t cp = 0;
                ASSERT_EQ(ep_utf8_char((const uint8_t *) cases[i].s, cases[i].n, &cp), cases[i].len);
                if (cases[i].len > 0) {
                        ASSERT_EQ(cp, cases[i].cp);
                        ASSERT_EQ(ep_utf8_encode(cp, enc), cases[i].len);
                        ASSERT_TRUE(memcmp(enc, cases[i].s, cases[i].len) == 0);
                }
        }
        ASSERT_EQ(ep_utf8_encode(0xd800, enc), 1);
        ASSERT_EQ(enc[0], '?');
        ASSERT_EQ(ep_utf8_encode(0x110000, enc), 3); /* U+FFFD */
}

/* Every stored kind value has a row, and each row says what the readers of the table need. */
static void test_frame_kinds(void) {
        for (unsigned k = 0; k < _EP_FRAME_KIND_MAX; k++) {
                const EpFrameKind *fk = ep_frame_kind(k);

                ASSERT_TRUE(fk != NULL);
                ASSERT_TRUE(fk->name && fk->otlp_type);
                for (unsigned j = 0; j < k; j++)
                        ASSERT_TRUE(!streq(ep_frame_kind(j)->name, fk->name));
                /* Names outlive the process only when the identity names the content. */
                if (fk->symbols_persist)
                        ASSERT_EQ(fk->identity, EP_FRAME_ID_FILE_OFFSET);
                /* A process's frame without a name is still shown as something. */
                if (fk->identity == EP_FRAME_ID_PROCESS_ADDR)
                        ASSERT_TRUE(fk->unnamed && fk->view);
                ASSERT_EQ(ep_frame_kind_per_process(k), fk->identity == EP_FRAME_ID_PROCESS_ADDR);
                ASSERT_EQ(ep_frame_kind_has_file(k), fk->identity == EP_FRAME_ID_FILE_OFFSET);
        }
        ASSERT_TRUE(ep_frame_kind(_EP_FRAME_KIND_MAX) == NULL);
        ASSERT_TRUE(ep_frame_kind(255) == NULL);
        ASSERT_TRUE(!ep_frame_kind_per_process(255));
        ASSERT_TRUE(streq(ep_frame_kind(EP_FRAME_CPYTHON)->otlp_type, "cpython"));
        ASSERT_TRUE(streq(ep_frame_kind(EP_FRAME_UNMAPPED)->otlp_type, "native"));
        ASSERT_TRUE(streq(ep_frame_kind(EP_FRAME_KERNEL)->otlp_type, "kernel"));
}

static void check_sanitized(const char *in, bool keep_newlines, const char *want, size_t replaced) {
        char buf[256];
        size_t n = strlen(in);

        memcpy(buf, in, n + 1);
        ASSERT_EQ(ep_utf8_sanitize_text(buf, n, keep_newlines), replaced);
        ASSERT_STREQ(buf, want);
}

/* What a terminal or a log gets of names a profiled program controls: no escape sequence (C0,
 * DEL, C1) or broken UTF-8 gets through; everything else is kept as it is. */
static void test_sanitize_text(void) {
        /* Kept: text, tabs, newlines where asked, any valid character from U+00A0 on. */
        check_sanitized("main\tfoo.c:12\n", true, "main\tfoo.c:12\n", 0);
        check_sanitized("main\nforged line", false, "main?forged line", 1);
        check_sanitized("caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x94\xa5 \xc2\xa0", true,
                        "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x94\xa5 \xc2\xa0", 0);
        /* A window title and a screen clear in a comm, a bell, a carriage return. */
        check_sanitized("\x1b]0;pwned\x07x", true, "?]0;pwned?x", 2);
        check_sanitized("\x1b[2J\x1b[Hrm -rf\r", true, "?[2J?[Hrm -rf?", 3);
        /* DEL, and C1's CSI (U+009B) and OSC (U+009D): two bytes each, both replaced. */
        check_sanitized("a\x7f" "b\xc2\x9b" "2Jc\xc2\x9d", true, "a?b??2Jc??", 5);
        /* Broken UTF-8: a lone continuation byte, a cut sequence, an overlong ESC. */
        check_sanitized("\x80x\xe2\x86" "y\xc0\x9b", true, "?x??y??", 5);
        check_sanitized("", true, "", 0);
}

/* A setting as /proc/sys has it, and the errors of one that is not there or not a number. */
static void test_sysctl(void) {
        char text[64] = {};
        long v = -1;

        FILE *f = fopen("/proc/sys/kernel/pid_max", "re");
        ASSERT_TRUE(f && fgets(text, sizeof text, f));
        fclose(f);
        ASSERT_OK(ep_sysctl_int("kernel/pid_max", &v));
        ASSERT_EQ(v, strtol(text, NULL, 10));
        ASSERT_EQ(ep_sysctl_int("kernel/no_such_setting", &v), -ENOENT);
        ASSERT_EQ(ep_sysctl_int("kernel/ostype", &v), -EBADMSG); /* "Linux" */
}

int main(void) {
        test_utf8();
        test_sanitize_text();
        test_frame_kinds();
        test_hashmap();
        test_hashmap_counts();
        test_wire_buf();
        test_file_id();
        test_file_id_of_a_user_file();
        test_sha256();
        test_parse();
        test_sysctl();
        return tests_summary("common");
}
