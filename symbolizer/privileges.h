/* SPDX-License-Identifier: MIT */
#pragma once

/* The symbolizer parses untrusted files and must hold no privilege. If started as root with a
 * user name, it switches to that user (no supplementary groups). Either way it then drops every
 * capability (effective, permitted, inheritable, ambient, and the bounding set when it may),
 * and sets no_new_privs. */

/* user may be NULL. Returns 0, or a negative errno when a requested step failed. */
int ep_drop_privileges(const char *user);
/* True if any capability is still effective or permitted. */
int ep_have_capabilities(void);
