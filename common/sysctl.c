/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>

#include "macro.h"
#include "sysctl.h"

int ep_sysctl_int(const char *name, long *ret) {
        char path[256];
        long v;

        if ((size_t) snprintf(path, sizeof path, "/proc/sys/%s", name) >= sizeof path)
                return -ENAMETOOLONG;
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        if (fscanf(f, "%ld", &v) != 1)
                return -EBADMSG;
        *ret = v;
        return 0;
}

int ep_bounding_set_limit(uint64_t keep) {
        for (unsigned long cap = 0; cap < 64; cap++) {
                int in_set = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
                if (in_set < 0) /* past the last capability this kernel knows */
                        break;
                if (in_set > 0 && !(keep & (UINT64_C(1) << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                        return -errno;
        }
        return 0;
}
