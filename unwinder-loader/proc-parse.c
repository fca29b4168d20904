/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "proc-parse.h"

static int parse_hex(const char **p, char stop, uint64_t *ret) {
        uint64_t v = 0;
        const char *s = *p;
        int digits = 0;

        for (; isxdigit((unsigned char) *s); s++, digits++) {
                if (digits >= 16)
                        return -EINVAL;
                v = v << 4 | (uint64_t) (isdigit((unsigned char) *s) ? *s - '0' : (tolower(*s) - 'a' + 10));
        }
        if (digits == 0 || *s != stop)
                return -EINVAL;
        *p = s + 1;
        *ret = v;
        return 0;
}

int ep_parse_maps_line(char *line, EpMapsLine *ret) {
        const char *p = line;
        uint64_t start, end, pgoff, major, minor, inode = 0;
        char perms[4];
        size_t len;

        len = strlen(line);
        if (len > 0 && line[len - 1] == '\n')
                line[--len] = 0;

        if (parse_hex(&p, '-', &start) < 0 || parse_hex(&p, ' ', &end) < 0 || end < start)
                return -EINVAL;
        for (int i = 0; i < 4; i++)
                if (!(perms[i] = *p++))
                        return -EINVAL;
        if (*p++ != ' ')
                return -EINVAL;
        if (parse_hex(&p, ' ', &pgoff) < 0 || parse_hex(&p, ':', &major) < 0 ||
            parse_hex(&p, ' ', &minor) < 0)
                return -EINVAL;
        if (!isdigit((unsigned char) *p))
                return -EINVAL;
        for (; isdigit((unsigned char) *p); p++) {
                if (inode > (UINT64_MAX - 9) / 10)
                        return -EINVAL;
                inode = inode * 10 + (uint64_t) (*p - '0');
        }
        if (*p != ' ' && *p != 0)
                return -EINVAL;
        while (*p == ' ')
                p++;

        *ret = (EpMapsLine) {
                .start = start,
                .end = end,
                .pgoff = pgoff,
                .dev_major = (uint32_t) major,
                .dev_minor = (uint32_t) minor,
                .inode = inode,
                .read = perms[0] == 'r',
                .write = perms[1] == 'w',
                .exec = perms[2] == 'x',
                .shared = perms[3] == 's',
                .path = p,
        };
        return 0;
}

bool ep_maps_line_is_file(const EpMapsLine *m) {
        return m->inode != 0 && m->path[0] != 0 && m->path[0] != '[';
}

int ep_parse_stat_starttime(const char *stat, uint64_t *ret_ticks) {
        const char *p = strrchr(stat, ')');
        char *end;

        if (!p)
                return -EINVAL;
        p++;
        /* After the comm: field 3 (state) ... field 22 (starttime): skip 19 fields. */
        for (int field = 3; field < 22; field++) {
                while (*p == ' ')
                        p++;
                if (!*p)
                        return -EINVAL;
                while (*p && *p != ' ')
                        p++;
        }
        while (*p == ' ')
                p++;
        if (!isdigit((unsigned char) *p))
                return -EINVAL;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || (*end != ' ' && *end != '\n' && *end != 0))
                return -EINVAL;
        *ret_ticks = v;
        return 0;
}

const char *ep_status_field(const char *status, const char *name) {
        size_t n = strlen(name);
        const char *line = status;

        while (line) {
                if (strncmp(line, name, n) == 0 && line[n] == ':')
                        return line + n + 1;
                line = strchr(line, '\n');
                if (line)
                        line++;
        }
        return NULL;
}

static int parse_id(const char **p, int64_t *ret) {
        char *end;

        while (**p == ' ' || **p == '\t')
                (*p)++;
        if (!isdigit((unsigned char) **p))
                return -EINVAL;
        errno = 0;
        unsigned long long v = strtoull(*p, &end, 10);
        if (errno || v > INT64_MAX || (*end != ' ' && *end != '\t' && *end != '\n' && *end != 0))
                return -EINVAL;
        *p = end;
        *ret = (int64_t) v;
        return 0;
}

int ep_parse_status_ids(const char *status, EpStatusIds *ret) {
        const char *tgid = ep_status_field(status, "Tgid"), *uid = ep_status_field(status, "Uid");
        EpStatusIds ids;

        if (!tgid || !uid || parse_id(&tgid, &ids.tgid) < 0 || parse_id(&uid, &ids.uid) < 0 ||
            parse_id(&uid, &ids.euid) < 0)
                return -EINVAL;
        *ret = ids;
        return 0;
}

int ep_parse_status_nspid(const char *status, pid_t *ret) {
        const char *p = ep_status_field(status, "NSpid");

        if (!p)
                return -ENOENT;

        /* The last number on the line is the pid in the innermost namespace. */
        long last = -1;
        for (;;) {
                char *end;
                long v;

                while (*p == ' ' || *p == '\t')
                        p++;
                if (*p == '\n' || *p == '\0')
                        break;
                errno = 0;
                v = strtol(p, &end, 10);
                if (end == p || errno != 0 || v <= 0 || v > INT32_MAX)
                        return -EINVAL;
                last = v;
                p = end;
        }
        if (last < 0)
                return -ENOENT;
        *ret = (pid_t) last;
        return 0;
}

void ep_parse_container_id(const char *cgroup, char ret[65]) {
        const char *best = NULL;
        size_t run = 0;

        ret[0] = 0;
        for (const char *p = cgroup;; p++) {
                if (*p && isxdigit((unsigned char) *p) && !isupper((unsigned char) *p)) {
                        run++;
                        continue;
                }
                if (run == 64)
                        best = p - 64;
                run = 0;
                if (!*p)
                        break;
        }
        if (best) {
                memcpy(ret, best, 64);
                ret[64] = 0;
        }
}

int ep_parse_cpu_list(const char *s, bool *ret, size_t n) {
        int count = 0;

        memset(ret, 0, n * sizeof *ret);
        while (*s && *s != '\n') {
                unsigned long a, b;
                char *end;

                if (!isdigit((unsigned char) *s))
                        return -EINVAL;
                a = strtoul(s, &end, 10);
                b = a;
                if (*end == '-') {
                        if (!isdigit((unsigned char) end[1]))
                                return -EINVAL;
                        b = strtoul(end + 1, &end, 10);
                        if (b < a)
                                return -EINVAL;
                }
                for (unsigned long c = a; c <= b; c++) {
                        if (c < n && !ret[c]) {
                                ret[c] = true;
                                count++;
                        }
                        if (c >= n)
                                break;
                }
                s = end;
                if (*s == ',')
                        s++;
                else if (*s && *s != '\n')
                        return -EINVAL;
        }
        return count;
}

int ep_read_status(int proc_dirfd, char *buf, size_t size) {
        _cleanup_close_ int fd = openat(proc_dirfd, "status", O_RDONLY | O_CLOEXEC | O_NOCTTY);
        ssize_t n;

        if (fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        n = read(fd, buf, size - 1);
        if (n < 0)
                return errno == ESRCH ? -ESRCH : -errno;
        buf[n] = '\0';
        return 0;
}
