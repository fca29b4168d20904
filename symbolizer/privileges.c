/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "privileges.h"
#include "sysctl.h"

static int caps_get(struct __user_cap_data_struct data[2]) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };

        if (syscall(SYS_capget, &h, data) < 0)
                return -errno;
        return 0;
}

int ep_have_capabilities(void) {
        struct __user_cap_data_struct data[2] = {};
        int r = caps_get(data);

        if (r < 0)
                return r;
        for (size_t i = 0; i < 2; i++)
                if (data[i].effective || data[i].permitted)
                        return 1;
        return 0;
}

static int switch_user(const char *user) {
        struct passwd *pw;

        errno = 0;
        pw = getpwnam(user);
        if (!pw)
                return log_error_errno(errno ?: ENOENT, "Unknown user %s: %m", user);

        if (geteuid() == pw->pw_uid && getuid() == pw->pw_uid)
                return 0; /* already that user */
        if (geteuid() != 0)
                return log_error_errno(EPERM, "Cannot switch to user %s without being root: %m", user);

        if (setgroups(0, NULL) < 0)
                return log_error_errno(errno, "Failed to drop supplementary groups: %m");
        if (setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0)
                return log_error_errno(errno, "Failed to switch to group %u: %m", (unsigned) pw->pw_gid);
        if (setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
                return log_error_errno(errno, "Failed to switch to user %s: %m", user);
        log_debug("Running as user %s (%u).", user, (unsigned) pw->pw_uid);
        return 0;
}

int ep_drop_privileges(const char *user) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
        struct __user_cap_data_struct none[2] = {};
        int r;

        /* Needs CAP_SETPCAP; without it the bounding set stays, which is harmless once the
         * permitted set is empty and no_new_privs is set. */
        (void) ep_bounding_set_limit(0);
        (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        (void) prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);

        if (user) {
                r = switch_user(user);
                if (r < 0)
                        return r;
        }

        if (syscall(SYS_capset, &h, none) < 0)
                return log_error_errno(errno, "Failed to drop capabilities: %m");
        r = ep_have_capabilities();
        if (r < 0)
                return log_error_errno(r, "Failed to read capabilities: %m");
        if (r > 0)
                return log_error_errno(EPERM, "Capabilities remain after dropping them: %m");

        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return log_error_errno(errno, "Failed to set no_new_privs: %m");

        if (geteuid() == 0)
                log_warning("Running as root without capabilities. Use --user=%s (as the service "
                            "does) so the symbolizer owns nothing either.", EP_SYMBOLIZER_USER);
        return 0;
}
